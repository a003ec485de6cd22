import type { ActivityLog } from '../mosques/activity.ts';
import type { AdminStore } from '../mosques/admins.ts';
import type { MosqueRow, MosqueStore } from '../mosques/mosques.ts';
import type { Logger } from '../platform/log.ts';
import type { Queries } from '../platform/store/store.ts';
import type { Clock } from '../platform/clock.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { UserStore } from '../people/users.ts';
import type { Readiness, ReadinessCheck } from './readiness.ts';
import { AUTO_START_CLAIM_S, type Outcome, type ScheduleStore } from './schedule-store.ts';
import { mosqueTimes, slotKey, slotsOn, type MosqueTimes, type Slot } from './slots.ts';
import { addDays, civilDateAt, type CivilDate } from './zone.ts';
import { coalescedPass } from '../platform/flow/coalesced-pass.ts';

/** How many mosques' due events a pass handles at once (each mosque's own in order). */
const MOSQUES_AT_ONCE = 32;
/** The longest sleep: a Raspberry Pi without a clock chip jumps in time when NTP syncs after boot. */
export const MAX_SLEEP_MS = 60_000;
/** After a restart, events this recent are still handled (a missed check during a 20-minute outage runs). */
export const CATCH_UP_MS = 60 * 60_000;

type EventKind = 'ready' | 'start' | 'missed';

/** A broadcast start or stop as the schedule needs it (from HTTP's record, or a transmitter's own event). */
export interface BroadcastSignal {
  id: string;
  mosqueId: string;
  kind: string;
  prayer: string | null;
}

export interface SchedulerDeps {
  clock: Clock;
  logger: Logger;
  leadMs: number;
  graceMs: number;
  mosques: Pick<MosqueStore, 'findById' | 'listCalculated'>;
  store: ScheduleStore;
  admins: Pick<AdminStore, 'listForMosque'>;
  users: Pick<UserStore, 'findById'>;
  activity: Pick<ActivityLog, 'record'>;
  /** The store port a missed azaan's activity entry is written through (the schedule's own rows go through `store`). */
  queries: Queries;
  notifier: Notifier;
  pageUrl: PageUrl;
  readiness: ReadinessCheck;
  /** Web Push to these users (the broadcasts outbox, wired in service.ts). */
  push: (userIds: string[], payload: Record<string, unknown>) => void;
  /** A mosque's times changed here (its fields or timetable): its players' offline plans follow (src/schedule/offline-plan.ts). */
  timesChanged?: (mosqueId: string) => void;
  /** Where a slot's recorded status change is told: the mosque's open event streams (the console's live schedule page). */
  announce?: (mosqueId: string, event: () => ScheduleEvent) => void;
  /** The auto_start port: starts the broadcast of a slot, as a trigger admin would. */
  /**
   * `guard` runs inside the start's transaction once the broadcast's row is written, given its id; false refuses
   * the start and nothing is written.
   */
  startAzaan: (
    mosqueId: string, call: { kind: 'azaan' | 'jummah'; prayer: string }, guard?: (q: Queries, broadcastId: string) => Promise<boolean>,
  ) => Promise<{ ok: true; broadcastId: string } | { ok: false; message: string }>;
  /**
   * With an audio server (src/broadcasts/source-follow.ts), what it saw decides: whether the mosque's source was
   * on air between the two times (ms), why not, and the recorded azaan played instead. Absent: a started azaan
   * broadcast serves the slot.
   */
  source?: {
    sounded(mosqueId: string, fromMs: number, toMs: number): Promise<boolean>;
    problem(): 'no_source' | 'audio_server_unreachable';
    startFallback(mosqueId: string, prayer: string): Promise<string | null>;
  };
}

/** The event-stream message of a slot's new status (docs/api.md, "Live events of a mosque"). */
export interface ScheduleEvent {
  type: 'schedule';
  date: string;
  prayer: string;
  index: number;
  status: string;
  at: string;
}

const title = (prayer: string) => (prayer === 'jumuah' ? "Jumu'ah" : prayer[0]!.toUpperCase() + prayer.slice(1));

/**
 * One scheduler for every mosque: a single timer sleeps until the next due event (ready check, auto start,
 * missed check) of any mosque, handles what is due, and sleeps again. Slots are derived; what happened to
 * them is in schedule_slots, so a restart neither repeats nor skips an event within CATCH_UP_MS.
 */
export function createScheduler(deps: SchedulerDeps) {
  const { clock, leadMs, graceMs } = deps;
  // Every status change goes through here, so a listener hears each one (ready check, start, missed, stop).
  const store: ScheduleStore = {
    ...deps.store,
    async record(slot, outcome, nowMs) {
      await deps.store.record(slot, outcome, nowMs);
      deps.announce?.(slot.mosqueId, () => ({ type: 'schedule', date: slot.date, prayer: slot.prayer, index: slot.index, status: outcome.status, at: new Date(clock()).toISOString() }));
    },
  };
  const derived = new Map<string, { updatedAt: number; times: MosqueTimes; days: Map<string, Slot[]> }>();
  const handled = new Map<string, number>(); // event key -> event time, pruned past CATCH_UP_MS
  let timer: NodeJS.Timeout | null = null;
  let stopped = true;

  function slotsFor(row: MosqueRow, date: CivilDate): Slot[] {
    let entry = derived.get(row.id);
    if (!entry || entry.updatedAt !== row.updated_at) {
      entry = { updatedAt: row.updated_at, times: mosqueTimes(row), days: new Map() };
      derived.set(row.id, entry);
    }
    const key = `${date.y}-${date.m}-${date.d}`;
    let slots = entry.days.get(key);
    if (!slots) {
      slots = slotsOn(entry.times, date, store.timetableDay(row.id, date.m, date.d));
      if (entry.days.size > 8) entry.days.clear();
      entry.days.set(key, slots);
    }
    return slots;
  }

  /** Yesterday, today and tomorrow on the mosque's calendar: every slot whose events can be near now. */
  function nearSlots(row: MosqueRow, now: number): Slot[] {
    const today = civilDateAt(now, row.timezone);
    return [-1, 0, 1].flatMap((n) => slotsFor(row, addDays(today, n)));
  }

  function eventsOf(row: MosqueRow, slot: Slot): Array<[EventKind, number]> {
    const events: Array<[EventKind, number]> = [['ready', slot.azaanAt - leadMs]];
    // The second start is the takeover: a process that claimed the start and died before starting leaves a claim
    // that any process may take once it is AUTO_START_CLAIM_S old (src/schedule/schedule-store.ts).
    if (row.auto_start === 1) events.push(['start', slot.azaanAt], ['start', slot.azaanAt + AUTO_START_CLAIM_S * 1000]);
    events.push(['missed', slot.azaanAt + graceMs]);
    return events;
  }

  async function alertAdmins(row: MosqueRow, slot: Slot, kind: 'azaan_not_ready' | 'azaan_missed', r: Readiness, reason: string | null = null): Promise<void> {
    if (!(await store.claimAlert(slot, kind, clock()))) return;
    // The mosque's devices page shows the transmitter and players the alert is about.
    const link = deps.pageUrl(`/mosques/${row.id}/devices`);
    const said = alertText(row, slot, kind, r, reason);
    const text = `${said} ${link}`;
    const admins = (await deps.admins.listForMosque(row.id)).filter((a) => a.can_trigger === 1);
    for (const admin of admins) {
      const user = await deps.users.findById(admin.user_id);
      const phoneOnly = admin.email.endsWith('@phone.invalid');
      if (phoneOnly && !user?.phone) continue;
      deps.notifier.send({ channel: phoneOnly ? 'sms' : 'email', to: phoneOnly ? user!.phone! : admin.email, purpose: kind, text, link });
    }
    deps.push(admins.map((a) => a.user_id), { title: kind === 'azaan_missed' ? `Missed azaan: ${title(slot.prayer)}` : `Azaan not ready: ${title(slot.prayer)}`, body: said, mosque_id: row.id, kind, prayer: slot.prayer, date: slot.date });
  }

  /** Broadcasts this process is auto-starting, by id, with their slot: the start's transaction recorded it already. */
  const startingHere = new Map<string, Slot>();

  /**
   * An auto start (docs/schedule.md, "What admins receive, and when"): the claim, then one transaction that
   * writes the broadcast, checks the claim is still this pass's and records the slot as served by it. Its claim's
   * conditions are the slot's outcome (no broadcast, not live, done or missed), so no read comes first: with a
   * thousand mosques due in one minute, each round trip saved is one the last mosque's players no longer wait for.
   */
  async function autoStart(row: MosqueRow, slot: Slot, now: number): Promise<void> {
    if (now > slot.azaanAt + graceMs) return;
    if (!(await store.claimAutoStart(slot, now))) return; // another process holds it (or started it), or the slot is served
    // A Jumu'ah slot's call is a jummah broadcast (its own notification toggle); every other slot's an azaan.
    // The start holds only while the claim is still this pass's: a process cut off between its claim and its
    // start (its write waiting on a dead network) may finish the write long after another took the slot over.
    let startedId: string | null = null;
    const started = await deps.startAzaan(row.id, { kind: slot.prayer === 'jumuah' ? 'jummah' : 'azaan', prayer: slot.prayer }, async (q, id) => {
      if (!(await store.holdsAutoStart(slot, now, q, id))) return false;
      startingHere.set((startedId = id), slot);
      return true;
    }).finally(() => startedId !== null && startingHere.delete(startedId));
    if (!started.ok) {
      await store.releaseAutoStart(slot, now);
      return void deps.logger.warn({ mosque_id: row.id, prayer: slot.prayer, err: started.message }, 'scheduled azaan not started');
    }
    deps.announce?.(slot.mosqueId, () => ({ type: 'schedule', date: slot.date, prayer: slot.prayer, index: slot.index, status: 'live', at: new Date(clock()).toISOString() }));
  }

  async function handle(kind: EventKind, row: MosqueRow, slot: Slot, now: number): Promise<void> {
    if (kind === 'start') return autoStart(row, slot, now);
    const outcome = await store.outcome(slot);
    const served = outcome !== null && (outcome.status === 'live' || outcome.status === 'done' || outcome.broadcast_id !== null);
    if (kind === 'ready') {
      if (outcome !== null || now > slot.azaanAt + graceMs) return;
      const r = await deps.readiness(row.id);
      await store.record(slot, { status: r.ready ? 'ready' : 'not_ready', reason: r.reason, readiness: summary(r) }, now);
      if (!r.ready) await alertAdmins(row, slot, 'azaan_not_ready', r);
      return;
    }
    // With an audio server, only a source on air serves the slot (a broadcast may wait for one that never came).
    const source = deps.source;
    const sounded = source ? await source.sounded(row.id, slot.azaanAt - leadMs, now) : served;
    if (sounded || outcome?.status === 'missed') return;
    const r = await deps.readiness(row.id);
    const reason = r.reason ?? (source ? source.problem() : 'not_started');
    await store.record(slot, { status: 'missed', reason, readiness: summary(r) }, now);
    const fallback = source ? await source.startFallback(row.id, slot.prayer) : null;
    await deps.activity.record(deps.queries, {
      mosqueId: row.id, actorUserId: null, kind: 'schedule.azaan_missed', subjectId: slotKey(slot),
      data: { date: slot.date, prayer: slot.prayer, azaan_local: slot.azaanLocal, reason, ...(fallback && { fallback_broadcast_id: fallback }) },
    });
    await alertAdmins(row, slot, 'azaan_missed', r, reason);
  }

  /** Every mosque with prayer times: calculated ones, and those with an uploaded timetable, by id. */
  async function scheduledMosques(): Promise<MosqueRow[]> {
    const rows = await deps.mosques.listCalculated();
    const seen = new Set(rows.map((r) => r.id));
    for (const id of deps.store.timetableMosques()) {
      const row = seen.has(id) ? null : await deps.mosques.findById(id);
      if (row) rows.push(row);
    }
    return rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  }

  /** Handles every event that is due; returns the time of the next one (or null). */
  async function passOnce(): Promise<number | null> {
    const now = clock();
    const floor = now - CATCH_UP_MS;
    let next: number | null = null;
    for (const [key, at] of handled) if (at < floor) handled.delete(key);
    // Each mosque's due events in order (a slot's readiness before its start before its check); the mosques side
    // by side, MOSQUES_AT_ONCE at a time: one after another, a thousand auto starts due in the same minute took
    // 12 s to all begin on PostgreSQL, each waiting for the round trips of the one before.
    const due = new Map<string, Array<() => Promise<void>>>();
    for (const row of await scheduledMosques()) {
      const since = (row.schedule_since ?? 0) * 1000;
      for (const slot of nearSlots(row, now)) {
        for (const [kind, at] of eventsOf(row, slot)) {
          if (at > now) {
            next = next === null ? at : Math.min(next, at);
            continue;
          }
          const key = `${slotKey(slot)}|${kind}|${at}`;
          if (at < floor || at < since || handled.has(key)) continue;
          handled.set(key, at);
          const jobs = due.get(row.id) ?? [];
          jobs.push(async () => {
            try {
              await handle(kind, row, slot, now);
            } catch (err) {
              deps.logger.error({ mosque_id: row.id, prayer: slot.prayer, event: kind, err: (err as Error).message }, 'schedule event failed');
            }
          });
          due.set(row.id, jobs);
        }
      }
    }
    const queue = [...due.values()];
    const worker = async () => {
      for (let jobs = queue.shift(); jobs; jobs = queue.shift()) for (const job of jobs) await job();
    };
    await Promise.all(Array.from({ length: Math.min(MOSQUES_AT_ONCE, queue.length) }, worker));
    return next;
  }

  // One pass at a time (the timer, a mosque's change, a test's runDue may ask together): two passes at once would
  // both see an event as not yet handled before either marked it.
  const runDue = coalescedPass(passOnce);

  /** A pass, then the timer for the next event; a pass that fails is logged and the timer set all the same. */
  async function arm(): Promise<void> {
    if (stopped) return;
    let next: number | null = null;
    try {
      next = await runDue();
    } catch (err) {
      deps.logger.error({ err: (err as Error).message }, 'schedule pass failed');
    }
    if (stopped) return;
    if (timer) clearTimeout(timer);
    const delay = next === null ? MAX_SLEEP_MS : Math.max(0, Math.min(MAX_SLEEP_MS, next - clock()));
    timer = setTimeout(() => void arm(), delay);
    timer.unref();
  }

  /** The slot a start at `now` serves: its window holds now; the named prayer first, then the nearest. */
  async function slotServedBy(row: MosqueRow, b: BroadcastSignal, now: number): Promise<Slot | null> {
    const inWindow = nearSlots(row, now).filter((s) => s.azaanAt - leadMs <= now && now <= s.azaanAt + graceMs);
    const outcomes = await Promise.all(inWindow.map((s) => store.outcome(s)));
    // A slot that records this broadcast already stays open to it: an auto start records its own outcome
    // (handle above) while this runs, and must not push the broadcast onto a neighbouring slot (Jumu'ah's dhuhr).
    const open = inWindow.filter((_, i) => {
      const o = outcomes[i]!;
      return o === null || o.status === 'ready' || o.status === 'not_ready' || o.broadcast_id === b.id;
    });
    const named = (s: Slot) => b.prayer !== null && (s.prayer === b.prayer || (s.prayer === 'jumuah' && b.prayer === 'jummah'));
    open.sort((a, c) => Number(named(c)) - Number(named(a)) || Math.abs(a.azaanAt - now) - Math.abs(c.azaanAt - now));
    return open[0] ?? null;
  }

  return {
    start(): void {
      stopped = false;
      void arm();
    },
    stop(): void {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = null;
    },
    /** Runs what is due now and re-arms the timer (tests that move a manual clock call it); resolves after the pass. */
    async runDue(): Promise<void> {
      if (timer) clearTimeout(timer);
      timer = null;
      if (stopped) return void (await runDue());
      await arm();
    },
    /** A mosque's times changed: the next pass derives them again (and the timer wakes for the new first event). */
    mosqueChanged(mosqueId: string): void {
      derived.delete(mosqueId);
      if (!stopped) void this.runDue();
    },
    /** This process changed a mosque's times (not another's: that one tells its own players). */
    timesChanged(mosqueId: string): void {
      this.mosqueChanged(mosqueId);
      deps.timesChanged?.(mosqueId);
    },

    /**
     * An azaan (or Jumu'ah) broadcast started: it serves the slot whose window is open. Resolves to that slot;
     * never rejects (a failure is logged and answers null: the broadcast goes on without a slot).
     */
    async broadcastStarted(b: BroadcastSignal): Promise<Slot | null> {
      if (b.kind !== 'azaan' && b.kind !== 'jummah') return null;
      const own = startingHere.get(b.id);
      if (own) return own; // an auto start of this process: its transaction recorded the slot
      const now = clock();
      try {
        const row = await deps.mosques.findById(b.mosqueId);
        if (!row) return null;
        const slot = await slotServedBy(row, b, now);
        if (slot) await store.record(slot, { status: 'live', broadcastId: b.id }, now);
        return slot;
      } catch (err) {
        deps.logger.error({ mosque_id: b.mosqueId, broadcast_id: b.id, err: (err as Error).message }, 'schedule: broadcast start not recorded');
        return null;
      }
    },
    /** A broadcast stopped: the slot it served is done. Never rejects (a failure is logged). */
    async broadcastStopped(b: Pick<BroadcastSignal, 'id' | 'mosqueId'>): Promise<void> {
      try {
        const row = await store.findByBroadcast(b.mosqueId, b.id);
        if (!row || row.status !== 'live') return;
        const slot: Slot = {
          mosqueId: row.mosque_id, date: row.date, prayer: row.prayer as Slot['prayer'], index: row.idx, startsAt: row.starts_at * 1000,
          azaanAt: row.azaan_at * 1000, iqamahAt: row.iqamah_at === null ? null : row.iqamah_at * 1000, azaanLocal: '', source: row.source,
        };
        await store.record(slot, { status: 'done' }, clock());
      } catch (err) {
        deps.logger.error({ mosque_id: b.mosqueId, broadcast_id: b.id, err: (err as Error).message }, 'schedule: broadcast stop not recorded');
      }
    },

    /** The derived slots of one calendar date (the API merges the outcomes). */
    slotsOn: (row: MosqueRow, date: CivilDate) => slotsFor(row, date),
  };
}

export type Scheduler = ReturnType<typeof createScheduler>;

function summary(r: Readiness): Record<string, unknown> {
  return {
    transmitters: r.transmitters.map((t) => ({ id: t.id, connected: t.connected, status: t.status, last_seen_at: t.last_seen_at, error: t.error })),
    players_ready: r.players_ready,
  };
}

function alertText(row: MosqueRow, slot: Slot, kind: 'azaan_not_ready' | 'azaan_missed', r: Readiness, reason: string | null): string {
  const what = `${row.name}: ${title(slot.prayer)} azaan at ${slot.azaanLocal} (${slot.date})`;
  const offline = r.transmitters.filter((t) => !t.connected);
  const why =
    r.reason === 'transmitter_offline'
      ? r.transmitters.length === 0
        ? 'no transmitter is registered'
        : `transmitter offline ${offline[0]?.last_seen_at ? `since ${offline[0].last_seen_at}` : '(never connected)'}`
      : r.reason === 'transmitter_error'
        ? `transmitter error: ${r.transmitters.find((t) => t.error)?.error ?? 'unknown'}`
        : reason === 'no_source'
          ? 'the transmitter is online but sent no audio to the audio server'
          : reason === 'audio_server_unreachable'
            ? 'the audio server could not be reached'
            : 'no azaan broadcast was started';
  return kind === 'azaan_missed' ? `Missed: ${what}. Reason: ${why}.` : `Not ready: ${what}. ${why[0]!.toUpperCase()}${why.slice(1)}; ${r.players_ready} player(s) ready.`;
}
