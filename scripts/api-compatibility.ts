/**
 * The structural diff behind docs/api.md#versioning-apiv1-only-grows and
 * docs/firmware.md#7-versions-payloads-only-grow: given the API documents published at the last release
 * (docs/published/) and the ones the code generates now, it names every change that would break a client
 * written against the published ones. Adding is free; losing, narrowing or newly demanding anything is a break.
 *
 * Our own, not a library. Tried on these documents: api-smart-diff reads OpenAPI 3.1 offline but passed a
 * required request field named without a property (after an internal rule error) and classified no AsyncAPI 3
 * change as breaking, not even a lost channel; @asyncapi/diff reads AsyncAPI 3 but leaves payload changes (a
 * lost enum value, a new required field) unclassified; Atlassian's openapi-diff reads OpenAPI 3.0 at most,
 * @pb33f/openapi-changes downloads a Go binary when it installs, oasdiff is Go. Neither of the first two knows
 * which way an AsyncAPI message travels, which decides what breaks it. The documents here come from two
 * generators and use a small part of JSON Schema, so a few hundred lines cover them, and a keyword they do not
 * understand stops the diff (unsupported()) rather than passing silently.
 *
 * Every schema is compared in one of two directions:
 * - read:  the client reads what it describes (HTTP responses; messages the backend sends a device). It must
 *          not lose a field, let a required field go missing, lose an enum value or take a type it never had.
 * - write: the client writes it (request bodies, parameters; messages a device sends). Whatever was accepted
 *          must still be: no field, type, enum value or range taken away, no new required field, no new pattern.
 */

type Json = any; // parsed JSON documents, walked by hand
type Direction = 'read' | 'write';

/** What a schema allows, once its $ref is followed and its anyOf/oneOf alternatives are merged. */
interface View {
  types: Set<string> | null; // null: any type
  values: Set<string> | null; // JSON text of each enum/const value; null: not restricted to a list
  properties: Record<string, Json>;
  required: Set<string>;
  items: Json | undefined;
  additional: Json | undefined; // additionalProperties
  bounds: Map<string, number>;
  pattern: string | undefined;
}

/** Keywords that only describe or constrain nothing a client could break on. */
const IGNORED = new Set(['description', 'title', 'summary', 'default', 'examples', 'example', 'format', 'propertyNames',
  'deprecated', 'readOnly', 'writeOnly', 'contentMediaType', 'contentEncoding']);
const UNDERSTOOD = new Set([...IGNORED, '$ref', 'type', 'enum', 'const', 'anyOf', 'oneOf', 'properties', 'required',
  'items', 'additionalProperties', 'pattern', 'not', 'maxLength', 'minLength', 'maximum', 'minimum',
  'exclusiveMaximum', 'exclusiveMinimum', 'maxItems', 'minItems']);
/** A larger upper bound or a smaller lower bound accepts more; the opposite is a narrowing. */
const UPPER = ['maxLength', 'maximum', 'exclusiveMaximum', 'maxItems'];
const LOWER = ['minLength', 'minimum', 'exclusiveMinimum', 'minItems'];

function unsupported(what: string): never {
  throw new Error(`api-compatibility: ${what} is not understood; teach scripts/api-compatibility.ts before publishing it`);
}

/** RFC 6901 JSON Pointer inside the same document (the generators write no other $ref). */
function resolve(doc: Json, node: Json): Json {
  for (let hops = 0; node && typeof node === 'object' && typeof node.$ref === 'string'; hops++) {
    if (!node.$ref.startsWith('#/') || hops > 32) unsupported(`$ref ${node.$ref}`);
    node = node.$ref.slice(2).split('/').reduce((at: Json, part: string) => at?.[part.replace(/~1/g, '/').replace(/~0/g, '~')], doc);
    if (node === undefined) unsupported('a $ref that points nowhere');
  }
  return node;
}

const typeOfValue = (v: unknown): string =>
  v === null ? 'null' : Array.isArray(v) ? 'array' : typeof v === 'number' ? (Number.isInteger(v) ? 'integer' : 'number') : typeof v;

/** JSON Schema: every integer is a number, so a schema of type number also covers type integer. */
const covers = (types: Set<string> | null, t: string): boolean =>
  types === null || types.has(t) || (t === 'integer' && types.has('number'));

function view(doc: Json, raw: Json): View {
  const s = resolve(doc, raw ?? {});
  if (s === true) return view(doc, {});
  if (s === false) return { ...view(doc, {}), types: new Set() };
  if (typeof s !== 'object' || s === null) unsupported(`the schema ${JSON.stringify(s)}`);
  for (const k of Object.keys(s)) if (!UNDERSTOOD.has(k) && !k.startsWith('x-')) unsupported(`the keyword ${k}`);
  if (s.anyOf || s.oneOf) return merge(doc, [...(s.anyOf ?? []), ...(s.oneOf ?? [])]);
  if (s.not !== undefined) {
    // {"not": {}} is how the generators say "this field never comes": no type at all.
    if (Object.keys(s.not).length > 0) unsupported('a "not" other than {}');
    return { ...view(doc, {}), types: new Set() };
  }
  const listed = s.const !== undefined ? [s.const] : s.enum;
  const types = s.type !== undefined ? new Set<string>([s.type].flat())
    : listed ? new Set<string>(listed.map(typeOfValue)) : null;
  const bounds = new Map<string, number>();
  for (const k of [...UPPER, ...LOWER]) if (typeof s[k] === 'number') bounds.set(k, s[k]);
  return {
    types, values: listed ? new Set<string>(listed.map((v: unknown) => JSON.stringify(v))) : null,
    properties: s.properties ?? {}, required: new Set<string>(s.required ?? []), items: s.items,
    additional: s.additionalProperties, bounds, pattern: s.pattern,
  };
}

/**
 * anyOf/oneOf as the union of their alternatives (the generators use them for "T or null"): types and enum
 * values add up, a {"type": "null"} alternative adds the type without lifting the others' enum, and a bound
 * or pattern holds only when every other alternative has it.
 */
function merge(doc: Json, alternatives: Json[]): View {
  const all = alternatives.map((a) => view(doc, a));
  const onlyNull = (v: View) => v.types !== null && v.types.size === 1 && v.types.has('null');
  const real = all.filter((v) => !onlyNull(v));
  const out: View = { ...view(doc, {}), types: new Set(), values: real.length > 0 ? new Set() : null };
  for (const v of all) {
    out.types = out.types === null || v.types === null ? null : new Set([...out.types, ...v.types]);
    out.properties = { ...v.properties, ...out.properties };
    v.required.forEach((r) => out.required.add(r));
    out.items ??= v.items;
    out.additional ??= v.additional;
  }
  for (const v of real) out.values = out.values === null || v.values === null ? null : new Set([...out.values, ...v.values]);
  for (const k of [...UPPER, ...LOWER]) {
    const got = real.map((v) => v.bounds.get(k));
    if (got.length > 0 && got.every((b) => b !== undefined)) out.bounds.set(k, (UPPER.includes(k) ? Math.max : Math.min)(...(got as number[])));
  }
  if (real.length === 1) out.pattern = real[0]!.pattern;
  return out;
}

const list = (values: Iterable<string>) => [...values].join(', ');

/**
 * Pushes onto `out` each break between a published schema and the current one at `where` (a field path such
 * as `body.lines[].ts`). `seen` holds the $ref pairs on the way down, so a schema that contains itself ends.
 */
export function schemaBreaks(oldDoc: Json, oldS: Json, newDoc: Json, newS: Json, where: string, dir: Direction,
  out: string[], seen: Set<string> = new Set()): void {
  const pair = `${oldS?.$ref ?? ''}|${newS?.$ref ?? ''}`;
  if (pair !== '|' && seen.has(pair)) return;
  const below = pair === '|' ? seen : new Set([...seen, pair]);
  const was = view(oldDoc, oldS);
  const is = view(newDoc, newS);
  const lostTypes = dir === 'write' ? [...(was.types ?? ['any'])].filter((t) => !covers(is.types, t)) : [];
  // A field that never came ({"not": {}}) and now comes is an addition, not a new type of an old field.
  const gainedTypes = dir === 'read' && was.types !== null && was.types.size > 0
    ? [...(is.types ?? ['any'])].filter((t) => !covers(was.types, t)) : [];
  if (lostTypes.length) out.push(`${where}: no longer accepts type ${list(lostTypes)}`);
  if (gainedTypes.length) out.push(`${where}: may now be of type ${list(gainedTypes)}`);
  if (was.values && is.values) {
    const lost = [...was.values].filter((v) => !is.values!.has(v));
    if (lost.length) out.push(`${where}: enum loses ${list(lost)}`);
  } else if (dir === 'write' && is.values && !was.values) {
    out.push(`${where}: now accepts only ${list(is.values)}`);
  }
  for (const [name, sub] of Object.entries(was.properties)) {
    if (!(name in is.properties)) { out.push(`${where}.${name}: field removed`); continue; }
    schemaBreaks(oldDoc, sub, newDoc, is.properties[name], `${where}.${name}`, dir, out, below);
  }
  if (dir === 'read') {
    for (const name of was.required) if (!is.required.has(name) && name in is.properties) out.push(`${where}.${name}: was always present, now optional`);
  } else {
    for (const name of is.required) {
      if (was.required.has(name)) continue;
      out.push(`${where}.${name}: ${name in was.properties ? 'was optional, now required' : 'new required field'}`);
    }
    narrowings(was, is, where, out);
  }
  if (was.items !== undefined && is.items !== undefined) schemaBreaks(oldDoc, was.items, newDoc, is.items, `${where}[]`, dir, out, below);
  if (isSchema(was.additional) && isSchema(is.additional)) {
    schemaBreaks(oldDoc, was.additional, newDoc, is.additional, `${where}{*}`, dir, out, below);
  }
}

const isSchema = (s: unknown): boolean => typeof s === 'object' && s !== null;

/** In what a client writes: a tighter bound, a new or changed pattern, or unknown fields newly refused. */
function narrowings(was: View, is: View, where: string, out: string[]): void {
  for (const k of UPPER) {
    const [a, b] = [was.bounds.get(k), is.bounds.get(k)];
    if (b !== undefined && (a === undefined || b < a)) out.push(`${where}: ${k} narrows from ${a ?? 'none'} to ${b}`);
  }
  for (const k of LOWER) {
    const [a, b] = [was.bounds.get(k), is.bounds.get(k)];
    if (b !== undefined && (a === undefined || b > a)) out.push(`${where}: ${k} narrows from ${a ?? 'none'} to ${b}`);
  }
  // Whether one regular expression accepts all another does is not decidable here: any change counts.
  if (is.pattern !== undefined && is.pattern !== was.pattern) out.push(`${where}: pattern changes from ${was.pattern ?? 'none'} to ${is.pattern}`);
  if (is.additional === false && was.additional !== false) out.push(`${where}: now refuses fields it does not list`);
}

const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];
/** A path's place in the API: its server prefix and template, parameter names blanked (renaming {id} breaks no one). */
const pathKey = (full: string) => full.replace(/\{[^}]*\}/g, '{}');

function indexPaths(doc: Json): Map<string, { full: string; item: Json }> {
  const out = new Map<string, { full: string; item: Json }>();
  for (const [p, raw] of Object.entries(doc.paths ?? {})) {
    const item = resolve(doc, raw);
    const full = `${String((item.servers ?? doc.servers ?? [{ url: '' }])[0].url).replace(/\/$/, '')}${p}`;
    out.set(pathKey(full), { full, item });
  }
  return out;
}

/** Parameters by place: a path parameter by its position in the template, the others by `in` and name. */
function parametersOf(doc: Json, full: string, item: Json, op: Json): Map<string, Json> {
  const order = [...full.matchAll(/\{([^}]*)\}/g)].map((m) => m[1]);
  const out = new Map<string, Json>();
  for (const raw of [...(item.parameters ?? []), ...(op.parameters ?? [])]) {
    const p = resolve(doc, raw);
    const name = p.in === 'header' ? String(p.name).toLowerCase() : p.name;
    out.set(p.in === 'path' ? `path parameter #${order.indexOf(p.name) + 1}` : `${p.in} parameter ${name}`, p);
  }
  return out;
}

const isPublic = (doc: Json, op: Json): boolean => {
  const requirements: Json[] = op.security ?? doc.security ?? [];
  return requirements.length === 0 || requirements.some((r) => Object.keys(r).length === 0);
};

/** Every change from the published OpenAPI document to the current one that breaks a client of the first. */
export function openApiBreaks(oldDoc: Json, newDoc: Json): string[] {
  const out: string[] = [];
  const now = indexPaths(newDoc);
  for (const [key, { full, item }] of indexPaths(oldDoc)) {
    const match = now.get(key);
    if (!match) { out.push(`${full}: path removed`); continue; }
    for (const method of METHODS.filter((m) => item[m])) {
      const label = `${method.toUpperCase()} ${full}`;
      const op = match.item[method];
      if (!op) { out.push(`${label}: method removed`); continue; }
      operationBreaks(oldDoc, { full, item, op: item[method] }, newDoc, { full: match.full, item: match.item, op }, label, out);
    }
  }
  return [...new Set(out)];
}

interface Operation { full: string; item: Json; op: Json }

function operationBreaks(oldDoc: Json, was: Operation, newDoc: Json, is: Operation, label: string, out: string[]): void {
  if (isPublic(oldDoc, was.op) && !isPublic(newDoc, is.op)) out.push(`${label}: now needs credentials`);
  const params = parametersOf(newDoc, is.full, is.item, is.op);
  const before = parametersOf(oldDoc, was.full, was.item, was.op);
  for (const [key, p] of before) {
    const q = params.get(key);
    if (!q) { out.push(`${label}: ${key} removed`); continue; }
    if (!p.required && q.required) out.push(`${label}: ${key} was optional, now required`);
    schemaBreaks(oldDoc, p.schema, newDoc, q.schema, `${label}: ${key}`, 'write', out);
  }
  for (const [key, q] of params) if (!before.has(key) && q.required) out.push(`${label}: new required ${key}`);
  bodyBreaks(oldDoc, was.op.requestBody, newDoc, is.op.requestBody, `${label}: request`, out);
  const responses = is.op.responses ?? {};
  for (const [status, raw] of Object.entries(was.op.responses ?? {})) {
    // An error status that no longer happens breaks no one; a success answer that goes away breaks everyone.
    if (!(status in responses)) { if (/^[23]|^default$/.test(status)) out.push(`${label}: response ${status} removed`); continue; }
    const [r, s] = [resolve(oldDoc, raw), resolve(newDoc, responses[status])];
    for (const header of Object.keys(r.headers ?? {})) {
      if (!Object.keys(s.headers ?? {}).some((h) => h.toLowerCase() === header.toLowerCase())) out.push(`${label}: response ${status} header ${header} removed`);
    }
    for (const [media, content] of Object.entries<Json>(r.content ?? {})) {
      const next = s.content?.[media];
      if (!next) { out.push(`${label}: response ${status} ${media} removed`); continue; }
      schemaBreaks(oldDoc, content.schema, newDoc, next.schema, `${label}: response ${status} body`, 'read', out);
    }
  }
}

function bodyBreaks(oldDoc: Json, rawOld: Json, newDoc: Json, rawNew: Json, label: string, out: string[]): void {
  const was = rawOld ? resolve(oldDoc, rawOld) : undefined;
  const is = rawNew ? resolve(newDoc, rawNew) : undefined;
  if (!was) { if (is?.required) out.push(`${label} body newly required`); return; }
  if (!is) { out.push(`${label} body removed`); return; }
  if (!was.required && is.required) out.push(`${label} body was optional, now required`);
  for (const [media, content] of Object.entries<Json>(was.content ?? {})) {
    const next = is.content?.[media];
    if (!next) { out.push(`${label} body ${media} no longer accepted`); continue; }
    schemaBreaks(oldDoc, content.schema, newDoc, next.schema, `${label} body`, 'write', out);
  }
}

/**
 * Every change from the published AsyncAPI 3 document to the current one that breaks a device built against
 * the first. Its operations are the device's: `send` is what a device publishes (the backend reads it, so the
 * device writes: direction write), `receive` what the backend publishes to it (direction read).
 */
export function asyncApiBreaks(oldDoc: Json, newDoc: Json): string[] {
  const out: string[] = [];
  const channels = newDoc.channels ?? {};
  for (const [name, raw] of Object.entries(oldDoc.channels ?? {})) {
    const [ch, next] = [resolve(oldDoc, raw), channels[name] && resolve(newDoc, channels[name])];
    if (!next) { out.push(`channel ${name} (${ch.address}): removed`); continue; }
    if (pathKey(ch.address) !== pathKey(next.address)) out.push(`channel ${name}: address ${ch.address} is now ${next.address}`);
    for (const m of Object.keys(ch.messages ?? {})) if (!next.messages?.[m]) out.push(`channel ${name}: message ${m} removed`);
  }
  const operations = newDoc.operations ?? {};
  for (const [name, op] of Object.entries<Json>(oldDoc.operations ?? {})) {
    const next = operations[name];
    if (!next) { out.push(`operation ${name}: removed`); continue; }
    if (next.action !== op.action) out.push(`operation ${name}: action ${op.action} is now ${next.action}`);
    if (next.channel?.$ref !== op.channel?.$ref) out.push(`operation ${name}: channel ${op.channel?.$ref} is now ${next.channel?.$ref}`);
    const offered = new Set(messagesOf(newDoc, next));
    for (const ref of messagesOf(oldDoc, op)) {
      if (!offered.has(ref)) { out.push(`operation ${name}: message ${ref} removed`); continue; }
      const [m, n] = [resolve(oldDoc, { $ref: ref }), resolve(newDoc, { $ref: ref })];
      const dir: Direction = op.action === 'send' ? 'write' : 'read';
      schemaBreaks(oldDoc, m.payload, newDoc, n.payload, `${op.action} ${ref.replace('#/channels/', '')} payload`, dir, out);
    }
  }
  return [...new Set(out)];
}

/** An operation's message $refs; AsyncAPI 3: an operation that lists none carries all its channel's. */
function messagesOf(doc: Json, op: Json): string[] {
  if (op.messages) return op.messages.map((m: Json) => m.$ref);
  const ref: string = op.channel?.$ref ?? '';
  return Object.keys(resolve(doc, op.channel)?.messages ?? {}).map((m) => `${ref}/messages/${m}`);
}
