import { Hono } from 'hono';
import * as v from 'valibot';
import type { Firmware } from '../../src/firmware/firmware.ts';
import type { DevicePlane } from '../../src/devices/device-plane.ts';
import type { AppEnv } from '../context.ts';
import { ApiError, unwrap } from '../errors.ts';
import { actorOf, superadminOnly } from '../guards.ts';
import { id } from '../schemas.ts';
import { readJson } from '../validate.ts';

const pct = v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(100));
const group = v.union([
  v.object({ devices: v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(100_000)) }),
  v.object({ percent: v.pipe(v.number(), v.minValue(0.01), v.maxValue(100)) }),
]);
/** docs/api.md, "Firmware updates": POST /firmware/rollouts. */
export const RolloutCreate = v.object({
  image_id: id,
  mosque_ids: v.optional(v.pipe(v.array(id), v.minLength(1, 'name at least one mosque, or leave it out for everywhere'), v.maxLength(1000))),
  fw_range: v.optional(v.pipe(v.string(), v.minLength(1), v.maxLength(200))),
  groups: v.pipe(v.array(group), v.minLength(1, 'at least one group: the first is the canary'), v.maxLength(20)),
  success_threshold_pct: v.optional(pct),
  error_threshold_pct: v.optional(v.pipe(pct, v.minValue(1))),
  max_concurrent: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(10_000))),
  timeout_s: v.optional(v.pipe(v.number(), v.integer(), v.minValue(60), v.maxValue(7 * 86_400))),
});

const OFF = 'Firmware updates are off: set FIRMWARE_PUBLIC_KEY (docs/api.md, "Firmware updates").';

/** docs/api.md, "Firmware updates": rollouts (superadmin only) and a device's firmware history (gated as its timeline). */
export function firmwareRolloutRoutes(deps: { firmwareRollouts: Firmware['rollouts']; firmwareOn: boolean; plane: Pick<DevicePlane, 'open'> }) {
  const app = new Hono<AppEnv>();
  const rollouts = deps.firmwareRollouts;
  const on = () => {
    if (!deps.firmwareOn) throw new ApiError('conflict', OFF);
  };

  app.post('/firmware/rollouts', superadminOnly, async (c) => {
    on();
    const body = await readJson(c, RolloutCreate);
    return c.json(unwrap(await rollouts.create(body, c.var.user.id)), 201);
  });
  app.get('/firmware/rollouts', superadminOnly, async (c) => {
    on();
    return c.json(await rollouts.list());
  });
  app.get('/firmware/rollouts/:id', superadminOnly, async (c) => {
    on();
    const found = await rollouts.find(c.req.param('id'));
    if (!found) throw new ApiError('not_found', 'No rollout has that id.');
    return c.json(found);
  });
  for (const verb of ['pause', 'resume', 'cancel'] as const) {
    app.post(`/firmware/rollouts/:id/${verb}`, superadminOnly, async (c) => {
      on();
      return c.json(unwrap(await rollouts.move(c.req.param('id'), verb)));
    });
  }
  app.get('/devices/:id/firmware', async (c) => {
    const device = unwrap(await deps.plane.open(actorOf(c), c.req.param('id'), 'view'));
    return c.json(await rollouts.history(device.row.id));
  });
  return app;
}
