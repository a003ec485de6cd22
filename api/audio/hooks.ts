import crypto from 'node:crypto';
import { Hono } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import * as v from 'valibot';
import type { Audio } from '../../src/audio/audio.ts';
import { ACTIONS, HOOK_USER, type HookAnswer } from '../../src/audio/callbacks.ts';
import { rawHeader, type AppContext, type AppEnv } from '../context.ts';
import { ApiError, errorBody } from '../errors.ts';
import { createLimiter } from '../rate-limit.ts';
import { parseOrThrow } from '../validate.ts';

/** A callback is a short form (mount, ids, a lease or ticket of < 1 KiB); anything larger is not Icecast's. */
export const HOOK_BODY_LIMIT_BYTES = 8 * 1024;
/**
 * Per calling address and minute: one Icecast sends every callback, so this is its whole admission rate
 * (1,000 listeners joining within 10 s and leaving again is ~2,000), with room; a stranger guessing the secret
 * gets no further than that either.
 */
export const HOOK_RATE_PER_MINUTE = 30_000;

const FORM_TYPE = /^application\/x-www-form-urlencoded\s*(;|$)/i;
const text = (max: number) => v.optional(v.pipe(v.string(), v.maxLength(max)));
const count = v.optional(v.pipe(v.string(), v.regex(/^\d{1,15}$/, 'must be a whole number'), v.transform(Number)));

/** The fields of Icecast 2.4's url auth callbacks (icecast.org/docs/icecast-2.4.1/auth.html); others are ignored. */
export const HookForm = v.object({
  action: v.picklist(ACTIONS),
  mount: v.pipe(v.string(), v.minLength(1), v.maxLength(4096)),
  client: count,
  user: text(256),
  pass: text(256),
  ip: text(64),
  agent: text(1024),
  server: text(256),
  port: count,
  duration: count,
  bytes: count,
  admin: v.optional(v.picklist(['0', '1'])),
});
export const HookAction = v.picklist(ACTIONS);

/** Constant-time check of HTTP basic `icecast:<ICECAST_HOOK_SECRET>` (compared as SHA-256 digests, so lengths never leak). */
export function hookSecretCheck(secret: string): (authorization: string | undefined) => boolean {
  const expected = crypto.hash('sha256', `${HOOK_USER}:${secret}`, 'buffer');
  return (authorization) => {
    const m = /^Basic\s+([A-Za-z0-9+/=]{1,1024})$/i.exec(authorization ?? '');
    const presented = crypto.hash('sha256', m ? Buffer.from(m[1]!, 'base64').toString('utf8') : '', 'buffer');
    return crypto.timingSafeEqual(presented, expected) && m !== null;
  };
}

/**
 * POST /api/v1/audio/hooks/{action}: Icecast's URL authentication (docs/operator.md#audio-icecast). Form-encoded,
 * not JSON; authenticated by the hook secret, not a bearer token (api/index.ts lists the path as public). `admit`
 * answers `icecast-auth-user: 1`; every other answer refuses, with `icecast-auth-message` saying why.
 */
export function hookRoutes(deps: { audio: Audio | null; hookSecret: string | null }) {
  const app = new Hono<AppEnv>();
  const limit = createLimiter(HOOK_RATE_PER_MINUTE, null, 'audio-hooks');
  const secretOk = deps.hookSecret ? hookSecretCheck(deps.hookSecret) : () => false;
  const limitBody = bodyLimit({ maxSize: HOOK_BODY_LIMIT_BYTES, onError: () => { throw new ApiError('payload_too_large', `A callback body is at most ${HOOK_BODY_LIMIT_BYTES} bytes.`); } });

  app.post('/:action', limitBody, async (c) => {
    await limit(c.env.clientAddress());
    const audio = deps.audio;
    if (!audio) throw new ApiError('not_found', 'The audio server is off (ICECAST_URL is not set).');
    if (!secretOk(rawHeader(c.env.incoming, 'authorization'))) {
      throw new ApiError('unauthorized', 'The callback must carry the hook secret (HTTP basic, as icecast.xml from `minaret icecast-config` sends it).', { headers: { 'WWW-Authenticate': 'Basic realm="minaret-audio"' } });
    }
    const action = parseOrThrow(HookAction, c.req.param('action'));
    if (!FORM_TYPE.test(c.req.header('content-type') ?? '')) throw new ApiError('unsupported_media_type', 'The body must be application/x-www-form-urlencoded, as Icecast sends it.');
    const form = parseOrThrow(HookForm, Object.fromEntries(new URLSearchParams(await c.req.text())));
    if (form.action !== action) throw new ApiError('validation_failed', 'The action of the form differs from the path.', { details: [{ path: 'action', message: 'must match the path' }] });
    return answer(c, await audio.handleHook({ ...form, admin: form.admin === '1' }));
  });
  return app;
}

function answer(c: AppContext, a: HookAnswer): Response {
  if (a.kind === 'admit') {
    c.header('icecast-auth-user', '1');
    if (a.timelimitS !== undefined) c.header('icecast-auth-timelimit', String(a.timelimitS));
    return c.json({ admitted: true, ...(a.timelimitS !== undefined && { time_limit_s: a.timelimitS }) }, 200);
  }
  if (a.kind === 'noted') return c.json({ recorded: true }, 200);
  c.header('icecast-auth-message', a.reason);
  return c.json(errorBody('forbidden', `Refused: ${a.reason}.`), 403);
}
