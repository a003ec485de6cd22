import type { Client, PublishPacket } from 'aedes';
import type { DeviceInfo } from '../../src/devices/devices.ts';
import type { Telemetry } from '../../src/devices/telemetry/telemetry.ts';
import { MAX_PAYLOAD_BYTES, parseAck, parseBroadcast, parseHeartbeat, parseLog, parseStatus, type AckReport, type BroadcastEvent } from '../payloads.ts';
import { parseDeviceTopic } from '../topics.ts';
import type { HookDeps } from './deps.ts';
import type { PublishRefusal } from './refusals.ts';

/** How a publish is answered: null to accept it as it is now, else the refusal (broker/hooks/refusals.ts). */
export type PublishAnswer = (refusal: PublishRefusal | null) => void;

export const payloadOf = (packet: PublishPacket) => (Buffer.isBuffer(packet.payload) ? packet.payload : Buffer.from(packet.payload));

/**
 * aedes republishes a stored will of a broker process whose heartbeat stopped (REDIS_URL; or this one's,
 * after a long stall), passing the device's client here if it has one. That client is open and alive, so
 * the will is not its dying word: persistence stamped the will with the broker id that stored it. A
 * connection's own will comes while it closes, and a packet off the wire carries no broker id.
 */
export const storedWillOf = (client: Client | null, packet: PublishPacket): { brokerId: string } | null => {
  const brokerId = (packet as { brokerId?: unknown }).brokerId;
  return (client === null || !client.closed) && typeof brokerId === 'string' ? { brokerId } : null;
};

/** What the publish hook does with an authorized publish: check, record, answer; and the stored wills. */
export function createIngest(deps: HookDeps) {
  /** Checks and records one publish, then answers it: a status only once its group commit settled. */
  function ingest(info: DeviceInfo, channel: string, packet: PublishPacket, answer: PublishAnswer): void {
    const payload = payloadOf(packet);
    if (payload.length > MAX_PAYLOAD_BYTES) {
      deps.telemetry.rejected(info.id, channel, 'too_large');
      return answer({ kind: 'payload_too_large', deviceId: info.id, channel });
    }
    const parsed =
      channel === 'status' ? parseStatus(info.kind, payload)
      : channel === 'heartbeat' ? parseHeartbeat(info.kind, payload)
      : channel === 'log' ? parseLog(payload)
      : channel === 'broadcast' ? parseBroadcast(payload)
      : parseAck(payload);
    if (!parsed.ok) {
      deps.telemetry.rejected(info.id, channel, parsed.reason);
      return answer({ kind: 'payload_invalid', deviceId: info.id, channel, reason: parsed.reason });
    }
    if (channel === 'status') {
      // aedes sends the PUBACK (and stores the retained status) when it is answered: after the commit.
      return deps.telemetry.status(info.id, parsed.value as Parameters<Telemetry['status']>[1], (err) => {
        answer(err ? { kind: 'not_written', deviceId: info.id } : null);
      });
    }
    if (channel === 'broadcast') {
      // Answered once the mosque's stream is read (the store may answer after other packets): aedes forwards
      // the packet as rewritten by then. A failed read refuses it as not written.
      forwardBroadcast(info, packet, parsed.value as BroadcastEvent).then(() => answer(null), (err: unknown) => {
        deps.telemetry.writeFailed(info.id, 'broadcast', err);
        answer({ kind: 'not_written', deviceId: info.id });
      });
      return;
    }
    if (!record(info, channel, packet, parsed.value, payload.length)) return answer({ kind: 'log_throttled', deviceId: info.id });
    answer(null);
  }

  /** Records a heartbeat, log or ack; false for a log line telemetry would not take. */
  function record(info: DeviceInfo, channel: string, packet: PublishPacket, value: unknown, bytes: number): boolean {
    // Only status is retained state; nothing else a device sends may linger on the broker. The packet is the
    // hook's to change ("Handler: authorizePublish" in aedes's docs/Aedes.md): aedes retains what it says.
    packet.retain = false;
    if (channel === 'heartbeat') deps.telemetry.heartbeat(info.id, value as Parameters<Telemetry['heartbeat']>[1]);
    else if (channel === 'log') return deps.telemetry.log(info.id, value as Parameters<Telemetry['log']>[1], bytes);
    else deps.onAck?.(info.id, value as AckReport);
    return true;
  }

  /**
   * A transmitter announcing its own mosque's broadcast, forwarded to leased players: never retained (a
   * retained start would replay to every player that subscribes later; the backend's own event is the
   * retained one), and with the mosque's own stream_url or none, so no transmitter can steer the players
   * elsewhere. Re-serialized from the checked value: players see only the fields of docs/firmware.md#43-broadcast-events-mosquesmosque_idbroadcast-qos-1-retained.
   * aedes forwards the packet as the hook left it ("Handler: authorizePublish" in aedes's docs/Aedes.md).
   */
  async function forwardBroadcast(info: DeviceInfo, packet: PublishPacket, event: BroadcastEvent): Promise<void> {
    packet.retain = false;
    const own = info.mosqueId ? ((await deps.mosqueStreamUrl?.(info.mosqueId)) ?? null) : null;
    const { stream_url: claimed, ...rest } = event;
    if (claimed !== undefined && claimed !== own) deps.telemetry.rejected(info.id, 'broadcast', 'foreign_stream_url');
    packet.payload = Buffer.from(JSON.stringify(claimed !== undefined && own ? { ...rest, stream_url: own } : rest));
    // It may serve (or end) a scheduled azaan (docs/schedule.md); the publish budget bounds how often this runs.
    if (info.mosqueId) deps.onDeviceBroadcast?.(info.mosqueId, { broadcast_id: event.broadcast_id, kind: event.kind, action: event.action });
  }

  /**
   * A publish without a client is the backend's own (configs, commands, broadcast events, clearing a
   * retained status with an empty payload) or a stored will (storedWillOf).
   */
  function clientless(packet: PublishPacket, answer: PublishAnswer): void {
    const parsed = parseDeviceTopic(packet.topic);
    if (!parsed || parsed.channel !== 'status' || payloadOf(packet).length === 0) return answer(null);
    storedWill(packet, parsed.deviceId, (packet as { brokerId?: string }).brokerId ?? null, answer);
  }

  /**
   * A stored will is held to the same schema and ingested only when the device has no live connection
   * anywhere: none here, and the row names no other broker process as its holder (a dead process's
   * claim is its own will's broker id, so that one does not count).
   */
  function storedWill(packet: PublishPacket, deviceId: string, brokerId: string | null, answer: PublishAnswer): void {
    const topic = parseDeviceTopic(packet.topic);
    const decide = async () => {
      // Who holds the connection is the row's word (each process claims it there): read from the store.
      const info = deps.device(deviceId) ?? (deps.loadDevice ? await deps.loadDevice(deviceId) : null);
      if (!info || topic?.deviceId !== deviceId || topic.channel !== 'status') return answer({ kind: 'will_ignored', deviceId });
      if (deps.telemetry.isConnected(info.id) || (await deps.telemetry.connectedElsewhere(info.id, brokerId))) {
        deps.logger.debug({ device_id: info.id, will_broker: brokerId }, 'stored will ignored: the device is connected');
        return answer({ kind: 'will_ignored', deviceId: info.id });
      }
      ingest(info, 'status', packet, answer);
    };
    decide().catch((err: unknown) => {
      deps.faults.report('stored will', err, { device_id: deviceId });
      answer({ kind: 'will_ignored', deviceId });
    });
  }

  return { ingest, clientless, storedWill };
}
