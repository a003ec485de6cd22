import type { Config } from '../platform/config.ts';
import type { Clock } from '../platform/clock.ts';
import type { Logger } from '../platform/log.ts';
import type { Store } from '../platform/store/store.ts';
import type { Notifier, PageUrl } from '../platform/notify.ts';
import type { AfterAnswer } from '../platform/flow/after-answer.ts';
import type { People } from '../people/build.ts';
import type { Mosques } from '../mosques/build.ts';
import { createMosqueOps } from '../mosques/mosque-ops.ts';
import type { DevicePlane } from '../devices/device-plane.ts';
import { recordingUrl, type Recordings } from '../audio/recordings.ts';
import { createScheduleStore } from './schedule-store.ts';
import { createScheduler, type SchedulerDeps } from './scheduler.ts';
import { createReadiness } from './readiness.ts';
import { createOfflinePlanner } from './offline-plan.ts';
import { createMosqueStory } from './stories/mosque-story.ts';
import { transmitterStory } from './stories/transmitter-story.ts';

export interface SchedulePorts {
  store: Store;
  clock: Clock;
  logger: Logger;
  notifier: Notifier;
  pageUrl: PageUrl;
  afterAnswer: AfterAnswer;
  people: Pick<People, 'users'>;
  mosques: Pick<Mosques, 'mosques' | 'admins' | 'activity' | 'memberships' | 'grants'>;
  plane: Pick<DevicePlane, 'ports' | 'offlinePlanChanged' | 'planOffline' | 'beforeMosqueDelete' | 'mosqueUpdated'>;
  recordings: Pick<Recordings, 'find' | 'listen'>;
  /** The broadcasts' side of an auto start, a push and what sounded (src/broadcasts/slot-story.ts, a sibling's). */
  slots: Pick<SchedulerDeps, 'startAzaan' | 'push' | 'source'>;
  /** PUBLIC_URL, else this process's own address: where players fetch the recorded azaan. */
  publicOrigin: () => string;
  announce: NonNullable<SchedulerDeps['announce']>;
  onError: (what: string, err: unknown) => void;
}

/**
 * The one azaan scheduler and its store; the stories of a mosque changed and of a transmitter's own broadcast;
 * the players' offline plans (docs/firmware.md, "The azaan without the network"). Mosque ops is built here as
 * the mosque story is its beforeDelete / onUpdated (docs/architecture.md, "Where each story lives").
 */
export async function buildSchedule(config: Config, p: SchedulePorts) {
  const { store, clock, plane, mosques, recordings } = p;
  const offlinePlanChanged = (why: 'schedule_changed' | 'recording_changed') => (mosqueId: string) =>
    void plane.offlinePlanChanged(mosqueId, why).catch((err: unknown) => p.onError('offline plan', err));
  const scheduleStore = await createScheduleStore(store, mosques.mosques);
  const scheduler = createScheduler({
    clock, logger: p.logger, leadMs: config.scheduleReadyLeadMinutes * 60_000, graceMs: config.scheduleGraceMinutes * 60_000,
    mosques: mosques.mosques, store: scheduleStore, admins: mosques.admins, users: p.people.users, activity: mosques.activity, queries: store,
    notifier: p.notifier, pageUrl: p.pageUrl, readiness: createReadiness(plane.ports.readiness), announce: p.announce,
    timesChanged: offlinePlanChanged('schedule_changed'),
    ...p.slots,
  });
  const mosqueStory = createMosqueStory({ plane, scheduleStore, scheduler });
  // docs/firmware.md, "The azaan without the network": an entitled player's config carries its coming azaans and the recording.
  plane.planOffline(createOfflinePlanner({
    slotsOn: scheduler.slotsOn,
    toggles: (mosqueId, userId, q) => mosques.memberships.findFor(mosqueId, userId, q),
    recording: (mosqueId, q) => recordings.find(mosqueId, q),
    recordingUrl: (mosqueId) => recordingUrl(p.publicOrigin(), mosqueId),
    graceS: config.offlineGraceS,
  }));
  recordings.listen(offlinePlanChanged('recording_changed'));
  const mosqueOps = createMosqueOps({
    store, mosques: mosques.mosques, admins: mosques.admins, users: p.people.users, activity: mosques.activity, memberships: mosques.memberships,
    grants: mosques.grants, afterAnswer: p.afterAnswer, beforeDelete: mosqueStory.beforeDelete, onUpdated: mosqueStory.updated,
  });
  return { scheduleStore, scheduler, mosqueOps, followChanges: mosqueStory.followChanges, onDeviceBroadcast: transmitterStory(scheduler) };
}
