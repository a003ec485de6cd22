import type { Selectable } from 'kysely';
import crypto from 'node:crypto';
import type { Store } from '../platform/store/store.ts';
import { toUnixSeconds, type Clock } from '../platform/clock.ts';
import type { AudioOnAirTable } from '../../generated/tables.ts';

/** A row of `audio_on_air` (generated/tables.ts), narrowed to the values written here. */
export type OnAirRow = Omit<Selectable<AudioOnAirTable>, 'end_reason'> & { end_reason: 'source_left' | 'reconciled' | null };

/** Told when a mosque's source goes live (`true`) or ends (`false`), in the process that recorded it. */
export type OnAirListener = (mosqueId: string, live: boolean) => void;

/**
 * When each mosque's mount had a live source (mount_add .. mount_remove), in audio_on_air. Read from the store
 * every time: with REDIS_URL another process may have recorded the callback (the file is shared).
 */
export function createOnAir(store: Store, clock: Clock, onError: (err: unknown) => void) {
  const now = () => toUnixSeconds(clock());
  const rows = () => store.selectFrom('audio_on_air').selectAll().$castTo<OnAirRow>();
  const open = () => rows().where('ended_at', 'is', null);
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
  const current = async (mosqueId: string): Promise<OnAirRow | null> => (await open().where('mosque_id', '=', mosqueId).executeTakeFirst()) ?? null;

  return {
    isOnAir: async (mosqueId: string): Promise<boolean> => (await current(mosqueId)) !== null,
    /** The open interval of a mosque, or null while it is off air. */
    current,
    listOnAir: (): Promise<OnAirRow[]> => open().orderBy('started_at').orderBy('id').execute(),
    /** The open intervals this device is the source of (one, or none). */
    sourcedBy: (deviceId: string): Promise<OnAirRow[]> => open().where('device_id', '=', deviceId).execute(),
    /** Intervals of a mosque that overlap [from, to) (Unix seconds). */
    listIntervals: (mosqueId: string, from: number, to: number): Promise<OnAirRow[]> =>
      rows().where('mosque_id', '=', mosqueId).where('started_at', '<', to)
        .where((eb) => eb.or([eb('ended_at', 'is', null), eb('ended_at', '>=', from)]))
        .orderBy('started_at').orderBy('id').execute(),
    onAirChange: (listener: OnAirListener) => void listeners.push(listener),
    /**
     * The source went live; false when it already was (a repeated or reconciled mount_add). The unique index
     * on a mosque's open interval refuses a second one: the insert does nothing then.
     */
    async start(mosqueId: string, deviceId: string | null): Promise<boolean> {
      const r = await store.insertInto('audio_on_air').values({ id: crypto.randomUUID(), mosque_id: mosqueId, device_id: deviceId, started_at: now() })
        .onConflict((oc) => oc.doNothing()).executeTakeFirst();
      const started = Number(r.numInsertedOrUpdatedRows ?? 0) === 1;
      if (started) tell(mosqueId, true);
      return started;
    },
    /** The source ended; false when it was not live. */
    async stop(mosqueId: string, reason: 'source_left' | 'reconciled'): Promise<boolean> {
      const r = await store.updateTable('audio_on_air').set({ ended_at: now(), end_reason: reason })
        .where('mosque_id', '=', mosqueId).where('ended_at', 'is', null).executeTakeFirst();
      const stopped = Number(r.numUpdatedRows) > 0;
      if (stopped) tell(mosqueId, false);
      return stopped;
    },
  };
}

export type OnAir = ReturnType<typeof createOnAir>;
