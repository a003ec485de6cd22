import { Hono } from 'hono';
import * as v from 'valibot';
import type { Pairings } from '../../src/devices/pairing/pairing.ts';
import type { UserStore } from '../../src/people/users.ts';
import type { AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { actorOf, holderOnly } from '../guards.ts';
import { createFailureLimiter, createLimiter, type LimiterStore } from '../rate-limit.ts';
import { freeText, id } from '../schemas.ts';
import { readJson } from '../validate.ts';
import { credentialIssuer, originOf } from './devices.ts';

/** RFC 8628 §5.1: the windows the pairing limits count over (docs/settings.md, PAIRING_*). */
const PAIRING_WINDOW_SECONDS = 600;

const shortText = (max: number) => v.optional(v.nullable(freeText(max)));
// Typed by a person: case, spaces and the dash do not matter; the shape is checked where it is hashed.
const userCode = v.pipe(v.string(), v.maxLength(32, 'must be at most 32 characters'));
export const PairingStart = v.object({
  kind: v.picklist(['stream_player', 'transmitter']),
  name: shortText(100),
  fw: shortText(64),
  hw_rev: shortText(64),
});
export const PairingToken = v.object({ device_code: v.pipe(v.string(), v.maxLength(128, 'must be at most 128 characters')) });
export const PairingApprove = v.object({ user_code: userCode, mosque_id: id, name: shortText(100) });
export const PairingDeny = v.object({ user_code: userCode });

interface Deps {
  pairings: Pairings;
  users: Pick<UserStore, 'findById'>;
  rateLimitStore: LimiterStore;
  pairingLimits: { guessesPerPerson: number; guessesPerAddress: number; startsPerAddress: number; pollHoldSeconds: number };
  mqttPort: () => number;
  mqttsPort: () => number | null;
  publicUrl: string | null;
}

/**
 * Pairing a device by a short code (docs/api.md, "Pairing a device"), RFC 8628 in Minaret's paths and error
 * body: the device starts and polls without a token; a signed-in person approves or denies by the user code.
 */
export function pairingRoutes(deps: Deps) {
  const app = new Hono<AppEnv>();
  const { pairings, pairingLimits: limits } = deps;
  const { issued } = credentialIssuer(deps);
  const starts = createLimiter(limits.startsPerAddress, deps.rateLimitStore, 'pairing-starts', PAIRING_WINDOW_SECONDS);
  const guessesOfPerson = createFailureLimiter(limits.guessesPerPerson, deps.rateLimitStore, 'pairing-guess-person', PAIRING_WINDOW_SECONDS);
  const guessesOfAddress = createFailureLimiter(limits.guessesPerAddress, deps.rateLimitStore, 'pairing-guess-address', PAIRING_WINDOW_SECONDS);

  /** Runs a person's try with a user code; a 404 (unknown, or not theirs) counts against both budgets. */
  const guess = async <T>(personId: string, address: string, attempt: () => Promise<T>): Promise<T> => {
    await guessesOfPerson.check(personId);
    await guessesOfAddress.check(address);
    try {
      return await attempt();
    } catch (err) {
      if (err instanceof ApiError && err.failure === 'not_found') await Promise.all([guessesOfPerson.fail(personId), guessesOfAddress.fail(address)]);
      throw err;
    }
  };

  app.post('/devices/pairing', async (c) => {
    const b = await readJson(c, PairingStart);
    await starts(c.env.clientAddress());
    const started = unwrap(await pairings.start({ kind: b.kind, name: b.name ?? null, fw: b.fw ?? null, hwRev: b.hw_rev ?? null }));
    const verification = new URL('/pair', originOf(c, deps.publicUrl));
    const complete = new URL(verification);
    complete.searchParams.set('code', started.userCode);
    c.header('Cache-Control', 'no-store'); // RFC 8628 §3.2 (RFC 6749 §5.1): codes are not for caches
    return c.json({
      device_code: started.deviceCode, user_code: started.userCode,
      verification_uri: verification.href, verification_uri_complete: complete.href,
      expires_in: started.expiresIn, interval: started.interval,
    });
  });

  app.post('/devices/pairing/token', async (c) => {
    const b = await readJson(c, PairingToken);
    const given = unwrap(await pairings.poll(b.device_code, limits.pollHoldSeconds * 1000));
    c.header('Cache-Control', 'no-store');
    return c.json(issued(c, given));
  });

  app.post('/devices/pairing/approve', holderOnly(deps.users), async (c) => {
    const b = await readJson(c, PairingApprove);
    const device = await guess(c.var.user.id, c.env.clientAddress(), async () => unwrap(await pairings.approve(actorOf(c), b.user_code, b.mosque_id, b.name ?? null)));
    return c.json({ device });
  });

  app.post('/devices/pairing/deny', async (c) => {
    const b = await readJson(c, PairingDeny);
    await guess(c.var.user.id, c.env.clientAddress(), async () => unwrap(await pairings.deny(b.user_code)));
    return c.body(null, 204);
  });

  return app;
}
