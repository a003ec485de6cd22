import { createRequire } from 'node:module';
import type { Ajv, Options } from 'ajv';

// ajv and ajv-formats are CommonJS: loaded through require, their types through `import type`.
const require = createRequire(import.meta.url);

/**
 * A JSON Schema validator: draft 2020-12 (OpenAPI 3.1 schemas) or draft-07 (AsyncAPI 3 payloads and the
 * AsyncAPI specification schema itself), with the standard formats (date-time, uri, ...).
 */
export function createAjv(draft: '2020-12' | 'draft-07', options: Options = {}): Ajv {
  const Ajv = draft === '2020-12' ? require('ajv/dist/2020').Ajv2020 : require('ajv').Ajv;
  const ajv = new Ajv({ strict: false, allErrors: true, ...options }) as Ajv;
  (require('ajv-formats') as (a: Ajv) => Ajv)(ajv);
  return ajv;
}
