import { Hono } from 'hono';
import type { Audio } from '../../src/audio/audio.ts';
import type { AdminStore } from '../../src/mosques/admins.ts';
import type { Memberships } from '../../src/mosques/memberships.ts';
import type { MosqueStore } from '../../src/mosques/mosques.ts';
import { toIsoString } from '../../src/platform/clock.ts';
import type { AppEnv } from '../context.ts';
import { ApiError } from '../errors.ts';
import { checkStanding } from '../guards.ts';

/**
 * POST /api/v1/mosques/{id}/listen (docs/api.md, "Listening in the console"): a short-lived listener address for an
 * approved member or an admin. Icecast asks Minaret again when it is opened, and the membership must still be
 * approved then; a ban or a removal cuts the listener.
 */
export function listenRoutes(deps: { audio: Audio | null; mosques: MosqueStore; admins: AdminStore; memberships: Memberships }) {
  const app = new Hono<AppEnv>();
  app.post('/:id/listen', async (c) => {
    // As the schedule: a pending member is told 403, anyone else who is neither member nor admin 404.
    const { mosque, standing } = await checkStanding(deps, c, c.req.param('id'), 'member');
    if (!standing.admin) {
      const membership = await deps.memberships.findFor(mosque.id, c.var.user.id);
      if (membership?.status !== 'approved') throw new ApiError(membership && membership.status !== 'banned' ? 'forbidden' : 'not_found');
    }
    if (!deps.audio) throw new ApiError('conflict', 'The audio server is off (ICECAST_URL is not set): the mosque streams from its own stream_url.');
    const { url, expiresAt } = deps.audio.listenUrl(c.var.user.id, mosque.id);
    return c.json({ url, expires_at: toIsoString(expiresAt) }, 201);
  });
  // What the audio server says of the mosque now, for its admins' console: on air since when, and how many listen.
  app.get('/:id/on-air', async (c) => {
    const { mosque } = await checkStanding(deps, c, c.req.param('id'), 'admin');
    if (!deps.audio) return c.json({ audio_server: false, on_air: false, since: null, listeners: 0, listening: { devices: 0, members: 0 } });
    const [current, open] = await Promise.all([deps.audio.currentOnAir(mosque.id), deps.audio.listOpenSessions(mosque.id)]);
    const devices = open.filter((s) => s.device_id !== null).length;
    return c.json({
      audio_server: true, on_air: current !== null, since: current ? toIsoString(current.started_at) : null,
      listeners: open.length, listening: { devices, members: open.length - devices },
    });
  });
  return app;
}
