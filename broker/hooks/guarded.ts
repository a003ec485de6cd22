import type { AuthenticateError } from 'aedes';
import { parseDeviceTopic } from '../topics.ts';
import type { HookDeps, Hooks } from './hooks.ts';
import { unwritten } from './ingest.ts';

// 3 "server unavailable" for a flapping device, not 5 "not authorized": its credentials are good and the
// refusal ends by itself; firmware backs off and retries on 3, while 5 reads as "re-provision me".
export const refuse = (returnCode: 3 | 4 | 5, message: string) => Object.assign(new Error(message), { returnCode }) as AuthenticateError;

/**
 * Every hook catches its own errors (issue 9): aedes calls them from its socket handlers, where a throw
 * (SQLITE_FULL, SQLITE_BUSY past the busy timeout, a bug) would end the process and every device with it.
 * A hook that threw before answering answers as below; one that threw after is only reported.
 */
export function guarded(hooks: Hooks, deps: HookDeps): Hooks {
  const once = <A extends unknown[]>(done: (...args: A) => void) => {
    // A status answers later (after its group commit): a hook that threw after queueing it must not answer twice.
    const answer = Object.assign((...args: A) => {
      if (answer.answered) return;
      answer.answered = true;
      done(...args);
    }, { answered: false });
    return answer;
  };
  return {
    preConnect(client, packet, done) {
      const answer = once(done);
      try {
        hooks.preConnect(client, packet, answer);
      } catch (err) {
        deps.faults.report('mqtt preConnect hook', err);
        if (!answer.answered) answer(null, true);
      }
    },
    authenticate(client, username, password, done) {
      const answer = once(done);
      try {
        hooks.authenticate(client, username, password, answer);
      } catch (err) {
        deps.faults.report('mqtt authenticate hook', err, { client_id: client.id });
        if (!answer.answered) answer(refuse(3, 'server unavailable'), false);
      }
    },
    // What could not be written is not acknowledged either: qos 0 makes aedes send no PUBACK, so a status
    // (QoS 1) stays in the device's flight window and is sent again; an acknowledged status is a written one.
    // The connection stays: MQTT 3.1.1 has no negative acknowledgement, and closing it would not help a full disk.
    authorizePublish(client, packet, done) {
      // On every publish (issue 13): one unnamed closure with a flag, not once()'s rest arguments and Object.assign
      // (and not a named one: under tsx each named closure also costs a keepNames __name call, ~2 % here).
      let answered = false;
      try {
        hooks.authorizePublish(client, packet, (err) => {
          if (answered) return;
          answered = true;
          done(err);
        });
      } catch (err) {
        // The topic is read here, on the rare throw, not before every publish (issue 13: per-packet work).
        const parsed = parseDeviceTopic(packet.topic);
        const deviceId = client?.id ?? parsed?.deviceId ?? null;
        if (deviceId) deps.telemetry.writeFailed(deviceId, parsed?.channel ?? 'publish', err);
        else deps.faults.report('mqtt publish hook', err);
        if (answered) return;
        answered = true;
        unwritten(packet, deviceId ?? 'unknown');
        done(null);
      }
    },
    authorizeSubscribe(client, sub, done) {
      const answer = once(done);
      try {
        hooks.authorizeSubscribe(client, sub, answer);
      } catch (err) {
        deps.faults.report('mqtt subscribe hook', err, { client_id: client.id });
        if (!answer.answered) answer(null, null);
      }
    },
    authorizeForward(client, packet) {
      try {
        return hooks.authorizeForward(client, packet);
      } catch (err) {
        deps.faults.report('mqtt forward hook', err, { client_id: client.id });
        return null;
      }
    },
  };
}
