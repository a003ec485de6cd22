import type { Context } from 'hono';
import * as v from 'valibot';
import { ApiError, type ErrorDetail } from './errors.ts';

const JSON_TYPE = /^application\/([\w.+-]+\+)?json\s*(;|$)/i;

/**
 * Reads and validates a JSON body once, at the edge. Issue messages never echo what was sent
 * (valibot's default messages do: "received ..."), since bodies carry password hashes and codes.
 */
export async function readJson<S extends v.GenericSchema>(c: Context, schema: S): Promise<v.InferOutput<S>> {
  if (!JSON_TYPE.test(c.req.header('content-type') ?? '')) throw new ApiError('unsupported_media_type');
  let body: unknown;
  try {
    body = JSON.parse(await c.req.text());
  } catch {
    throw new ApiError('validation_failed', 'The body is not valid JSON.', { details: [{ path: '', message: 'not valid JSON' }] });
  }
  return parseOrThrow(schema, body);
}

export function readQuery<S extends v.GenericSchema>(c: Context, schema: S): v.InferOutput<S> {
  return parseOrThrow(schema, c.req.query());
}

export function parseOrThrow<S extends v.GenericSchema>(schema: S, input: unknown): v.InferOutput<S> {
  const parsed = v.safeParse(schema, input, { message: describeIssue });
  if (parsed.success) return parsed.output;
  throw new ApiError('validation_failed', undefined, { details: parsed.issues.map(toDetail) });
}

function describeIssue(issue: v.BaseIssue<unknown>): string {
  if (issue.kind === 'schema') return issue.expected === 'never' ? 'unexpected key' : `expected ${issue.expected}`;
  return issue.expected ? `invalid ${issue.type}: expected ${issue.expected}` : `invalid ${issue.type}`;
}

function toDetail(issue: v.BaseIssue<unknown>): ErrorDetail {
  const path = (issue.path ?? []).map((p) => String(p.key)).join('.');
  return { path, message: issue.message };
}
