import { parseDeviceTopic } from '../topics.ts';
import type { HookDeps, Hooks } from './deps.ts';
import { createDeviceHooks, type DeviceHooks } from './hooks.ts';
import { applyPublishRefusal, connackError, forwardedAfter, subscriptionAfter, type ConnectRefusal, type PublishRefusal } from './refusals.ts';

/** The broker's hooks as aedes takes them: the rules of broker/hooks/hooks.ts behind the one adapter below. */
export function createHooks(deps: HookDeps): Hooks {
  return adapt(createDeviceHooks(deps), deps);
}

/**
 * The one place a DeviceRefusal becomes an aedes answer, through the table of broker/hooks/refusals.ts.
 * Every hook also catches its own errors: aedes calls them from its socket handlers, where a throw
 * (SQLITE_FULL, SQLITE_BUSY past the busy timeout, a bug) would end the process and every device with it
 * (docs/operator.md#faults). A hook that threw before answering answers with a refusal of its own; one that
 * threw after is only reported.
 */
export function adapt(hooks: DeviceHooks, deps: HookDeps): Hooks {
  return {
    preConnect(client, packet, done) {
      let answered = false;
      try {
        hooks.preConnect(client, packet);
        answered = true;
        done(null, true);
      } catch (err) {
        deps.faults.report('mqtt preConnect hook', err);
        if (!answered) done(null, true);
      }
    },
    authenticate(client, username, password, done) {
      let answered = false;
      const answer = (refusal: ConnectRefusal | null) => {
        answered = true;
        if (refusal) return done(connackError(refusal), false);
        done(null, true);
      };
      const failed = (err: unknown) => {
        deps.faults.report('mqtt authenticate hook', err, { client_id: client.id });
        if (!answered) done(connackError({ kind: 'server_busy' }), false);
      };
      try {
        const refusal = hooks.authenticate(client, username, password);
        // A promise only for a device memory did not know: read from the store first.
        if (refusal instanceof Promise) refusal.then(answer).catch(failed);
        else answer(refusal);
      } catch (err) {
        failed(err);
      }
    },
    // MQTT 3.1.1 has no negative acknowledgement: a publish that could not be written is answered
    // `not_written`, which withholds its PUBACK, and the connection stays (closing it would not help a full disk).
    authorizePublish(client, packet, done) {
      // On every publish: one closure with a flag, not rest arguments and Object.assign (bench/RESULTS.md).
      let answered = false;
      try {
        hooks.authorizePublish(client, packet, (refusal) => {
          if (answered) return;
          answered = true;
          done(refusal ? applyPublishRefusal(packet, refusal) : null);
        });
      } catch (err) {
        // The topic is read here, on the rare throw, not before every publish (per-packet work; docs/sizing.md).
        const parsed = parseDeviceTopic(packet.topic);
        const deviceId = client?.id ?? parsed?.deviceId ?? null;
        if (deviceId) deps.telemetry.writeFailed(deviceId, parsed?.channel ?? 'publish', err);
        else deps.faults.report('mqtt publish hook', err);
        if (answered) return;
        answered = true;
        const refusal: PublishRefusal = { kind: 'not_written', deviceId: deviceId ?? 'unknown' };
        done(applyPublishRefusal(packet, refusal));
      }
    },
    authorizeSubscribe(client, sub, done) {
      let answered = false;
      try {
        const refusal = hooks.authorizeSubscribe(client, sub);
        answered = true;
        done(null, subscriptionAfter(sub, refusal));
      } catch (err) {
        deps.faults.report('mqtt subscribe hook', err, { client_id: client.id });
        if (!answered) done(null, subscriptionAfter(sub, { kind: 'subscribe_failed' }));
      }
    },
    authorizeForward(client, packet) {
      try {
        return forwardedAfter(packet, hooks.authorizeForward(client, packet));
      } catch (err) {
        deps.faults.report('mqtt forward hook', err, { client_id: client.id });
        return forwardedAfter(packet, { kind: 'forward_denied' });
      }
    },
  };
}
