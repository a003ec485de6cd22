import crypto from 'node:crypto';
import type { Db } from '../platform/db.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';

export interface OnAirRow {
  id: string;
  mosque_id: string;
  device_id: string | null;
  started_at: number;
  ended_at: number | null;
  end_reason: 'source_left' | 'reconciled' | null;
}

/** Told when a mosque's source goes live (`true`) or ends (`false`), in the process that recorded it. */
export type OnAirListener = (mosqueId: string, live: boolean) => void;

/**
 * When each mosque's mount had a live source (mount_add .. mount_remove), in audio_on_air. Read from the store
 * every time: with REDIS_URL another process may have recorded the callback (the file is shared).
 */
export function createOnAir(db: Db, clock: Clock, onError: (err: unknown) => void) {
  const now = () => toUnixSeconds(clock());
  const openOf = db.prepare<[string], OnAirRow>('SELECT * FROM audio_on_air WHERE mosque_id = ? AND ended_at IS NULL');
  const openAll = db.prepare<[], OnAirRow>('SELECT * FROM audio_on_air WHERE ended_at IS NULL ORDER BY started_at, id');
  const openOfDevice = db.prepare<[string], OnAirRow>('SELECT * FROM audio_on_air WHERE device_id = ? AND ended_at IS NULL');
  const insert = db.prepare('INSERT INTO audio_on_air (id, mosque_id, device_id, started_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING');
  const end = db.prepare('UPDATE audio_on_air SET ended_at = ?, end_reason = ? WHERE mosque_id = ? AND ended_at IS NULL');
  const overlapping = db.prepare<[string, number, number], OnAirRow>(
    'SELECT * FROM audio_on_air WHERE mosque_id = ? AND started_at < ? AND (ended_at IS NULL OR ended_at >= ?) ORDER BY started_at, id',
  );
  const listeners: OnAirListener[] = [];
  const tell = (mosqueId: string, live: boolean) => {
    for (const l of listeners) {
      try {
        l(mosqueId, live);
      } catch (err) {
        onError(err); // the interval is recorded; a listener's failure must not make the callback look failed
      }
    }
  };

  return {
    isOnAir: (mosqueId: string) => openOf.get(mosqueId) !== undefined,
    /** The open interval of a mosque, or null while it is off air. */
    current: (mosqueId: string) => openOf.get(mosqueId) ?? null,
    listOnAir: () => openAll.all(),
    /** The open intervals this device is the source of (one, or none). */
    sourcedBy: (deviceId: string) => openOfDevice.all(deviceId),
    /** Intervals of a mosque that overlap [from, to) (Unix seconds). */
    listIntervals: (mosqueId: string, from: number, to: number) => overlapping.all(mosqueId, to, from),
    onAirChange: (listener: OnAirListener) => void listeners.push(listener),
    /** The source went live; false when it already was (a repeated or reconciled mount_add). */
    start(mosqueId: string, deviceId: string | null): boolean {
      const started = insert.run(crypto.randomUUID(), mosqueId, deviceId, now()).changes === 1;
      if (started) tell(mosqueId, true);
      return started;
    },
    /** The source ended; false when it was not live. */
    stop(mosqueId: string, reason: 'source_left' | 'reconciled'): boolean {
      const stopped = end.run(now(), reason, mosqueId).changes > 0;
      if (stopped) tell(mosqueId, false);
      return stopped;
    },
  };
}

export type OnAir = ReturnType<typeof createOnAir>;
