/**
 * The azaan plays even when the network does not (docs/firmware.md, "4.1 Config": `offline`; "3.1 Status": PLAYING
 * with `source: local`). A stream player keeps the mosque's recorded azaan in its state folder and one timer for
 * its next slot, from the last config it received (kept in DIR too, so a restart without the network still knows
 * it). At a slot's `at + grace_s`, unless a broadcast start for the mosque came within the grace (or a stream
 * plays), it plays the recording through the same sound card as a stream, and reports PLAYING `{source: "local",
 * reason: "offline_fallback", prayer, slot_at}`, published on the next connect when the broker is unreachable.
 *
 * It never plays past the lease's expiry, while MUTED (volume 0, quiet hours), UNBOUND, or for a slot the config
 * no longer lists; a start that arrives while the file plays replaces it with the stream (device/contract/firmware.ts).
 */
import type { Firmware } from './contract/firmware.ts';
import { nextSlot, offlinePlanOf, slotRefusal, LATE_LIMIT_S, type OfflinePlan, type Slot } from './contract/slots.ts';
import type { BroadcastMessage, DeviceConfig, DeviceStatus } from './contract/types.ts';
import { openFile } from './audio/player.ts';
import type { SoundCard } from './audio/output.ts';
import { RecordingStore } from './state/recording.ts';

type Stage = 'at' | 'grace' | 'wait';
const MAX_TIMER_MS = 2 ** 31 - 1;
const RETRY_MIN_MS = 30_000;
const RETRY_MAX_MS = 3_600_000;
const iso = (s: number): string => new Date(s * 1000).toISOString();

export class OfflineAzaan {
  private readonly store: RecordingStore;
  /** The last config received (this run's, else the one kept in DIR), its lease token left out. */
  private config: DeviceConfig | null = null;
  private doneAt = 0;
  /** The one slot timer, and what it fires for. */
  private timer: NodeJS.Timeout | null = null;
  private pending: { slot: Slot; stage: Stage } | null = null;
  private lastStartMs = 0;
  private download: { sha256: string; abort(): void } | null = null;
  private retry: { timer: NodeJS.Timeout; sha256: string } | null = null;

  constructor(private readonly fw: Firmware, private readonly card: SoundCard, dir: string, private readonly say: (line: string) => void) {
    this.store = new RecordingStore(dir);
  }

  start(): void {
    const kept = this.store.loadPlan();
    if (kept) {
      this.config = kept.config as DeviceConfig | null;
      this.doneAt = kept.done_at;
      // No config has come yet: play at the volume the last one set.
      if (typeof this.config?.volume === 'number') this.card.setVolume(this.config.volume);
    }
    this.fw.on('config', (cfg: DeviceConfig) => this.fw.guard('offline config', () => this.onConfig(cfg)));
    this.fw.on('broadcast', (msg: BroadcastMessage) => {
      if (msg.action === 'start') this.lastStartMs = Date.now();
    });
    this.fw.on('status', (to: DeviceStatus) => this.fw.guard('offline status', () => this.onStatus(to)));
    this.arm();
  }

  stop(): void {
    this.clearTimer();
    if (this.retry) clearTimeout(this.retry.timer);
    this.retry = null;
    this.download?.abort();
    this.download = null;
  }

  private get plan(): OfflinePlan | null {
    return offlinePlanOf(this.config?.['offline']) ?? null;
  }

  private onConfig(cfg: DeviceConfig): void {
    const { lease, ...rest } = cfg;
    this.config = { ...rest, ...(lease && { lease: { token: '', expires_at: lease.expires_at } }) };
    this.store.savePlan({ config: this.config, done_at: this.doneAt });
    const recording = this.plan?.recording;
    if (recording && lease?.token) this.fetchRecording(recording.sha256);
    this.arm();
  }

  // -------------------------------------------------------------------------------------------------
  // The recording

  private fetchRecording(sha256: string): void {
    if (this.store.current()?.sha256 === sha256) return; // already kept
    if (this.download?.sha256 === sha256 || (this.retry?.sha256 === sha256)) return; // under way, or waiting to try again
    this.download?.abort();
    this.download = null;
    this.startDownload(sha256, RETRY_MIN_MS);
  }

  private startDownload(sha256: string, nextDelayMs: number): void {
    if (this.retry) clearTimeout(this.retry.timer);
    this.retry = null;
    const ref = this.plan?.recording;
    const token = this.fw.config?.lease?.token;
    if (!ref || ref.sha256 !== sha256 || !token) return;
    const shown = ref.url.replace(/[?#].*$/s, '');
    this.say(`offline azaan: downloading the recording ${shown} (${ref.size} bytes, sha256 ${sha256.slice(0, 12)}…)`);
    const d = this.store.download(ref, token);
    const current = { sha256, abort: d.abort };
    this.download = current;
    void d.done.then((outcome) => this.fw.guard('offline download', () => {
      if (this.download !== current) return;
      this.download = null;
      if (outcome.ok) return this.say(`offline azaan: recording kept as ${outcome.recording.file}`);
      const kept = this.store.current();
      const keeping = kept ? `keeping the previous recording ${kept.sha256.slice(0, 12)}…` : 'no recording kept';
      if (outcome.mismatch) return this.say(`offline azaan: recording REJECTED and deleted: ${outcome.error}; ${keeping}`);
      // A network failure is tried again, with backoff, while the config still names this recording.
      this.say(`offline azaan: recording download failed: ${outcome.error}; ${keeping}; retrying in ${Math.round(nextDelayMs / 1000)} s`);
      this.retry = { timer: setTimeout(() => this.startDownload(sha256, Math.min(RETRY_MAX_MS, nextDelayMs * 2)), nextDelayMs), sha256 };
    }));
  }

  // -------------------------------------------------------------------------------------------------
  // The slot timer: one, re-armed on every config and after every slot

  private clearTimer(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    this.pending = null;
  }

  private arm(): void {
    this.clearTimer();
    const plan = this.plan;
    const nowMs = Date.now();
    const slot = plan ? nextSlot(plan, nowMs / 1000, this.doneAt) : null;
    if (!plan || !slot) return;
    const stage: Stage = nowMs < slot.at * 1000 ? 'at' : 'grace';
    this.schedule(slot, stage, stage === 'at' ? slot.at : slot.at + plan.grace_s);
  }

  private schedule(slot: Slot, stage: Stage, atS: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.pending = { slot, stage };
    this.timer = setTimeout(() => {
      this.timer = null;
      // A clock set back meanwhile (NTP after a boot without the network): not yet, wait again.
      if (Date.now() < atS * 1000 - 50) return this.schedule(slot, stage, atS);
      this.fw.guard('offline slot', () => this.fire(slot, stage));
    }, Math.min(Math.max(0, atS * 1000 - Date.now()), MAX_TIMER_MS));
  }

  private done(slot: Slot, outcome: string): void {
    this.say(`offline azaan: ${slot.prayer} slot at ${iso(slot.at)}: ${outcome}`);
    this.doneAt = Math.max(this.doneAt, slot.at);
    this.store.savePlan({ config: this.config, done_at: this.doneAt });
    this.arm();
  }

  /** A stream of the mosque plays now (not the local file): the slot is covered by the network. */
  private streamPlays(): boolean {
    return this.fw.status === 'PLAYING' && !this.fw.playingLocal;
  }

  private fire(slot: Slot, stage: Stage): void {
    const grace = this.plan?.grace_s ?? 0;
    if (stage === 'at') {
      if (this.streamPlays()) return this.done(slot, 'a broadcast plays: nothing to do');
      return this.schedule(slot, 'grace', slot.at + grace);
    }
    if (stage === 'wait') return this.done(slot, 'the broadcast that started neither played nor failed: nothing played');
    if (this.streamPlays()) return this.done(slot, 'a broadcast plays: nothing to do');
    if (Date.now() > (slot.at + grace + LATE_LIMIT_S) * 1000) return this.done(slot, 'found too late: nothing played');
    const startedInGrace = this.lastStartMs >= (slot.at - grace) * 1000;
    if (startedInGrace && this.fw.status !== 'STREAM_ERROR') {
      // The stream may still come within its 3 retries (device/audio/link.ts): PLAYING covers the slot, STREAM_ERROR does not.
      if (this.fw.playingBroadcast !== null) return this.schedule(slot, 'wait', slot.at + grace + LATE_LIMIT_S);
      return this.done(slot, 'a broadcast started within the grace: nothing to do');
    }
    this.playSlot(slot);
  }

  private onStatus(to: DeviceStatus): void {
    const p = this.pending;
    if (!p || p.stage !== 'wait') return;
    if (to === 'STREAM_ERROR') this.playSlot(p.slot);
    else if (to === 'PLAYING' && this.streamPlays()) this.done(p.slot, 'the broadcast plays: nothing to do');
  }

  /** Plays the kept recording for `slot`, or says why not (docs/firmware.md, "3.1 Status" and "5. The lease"). */
  private playSlot(slot: Slot): void {
    const live = this.fw.config !== null;
    const state = this.fw.status;
    if (live && state !== 'ONLINE' && state !== 'STREAM_ERROR') return this.done(slot, `not played: the device is ${state}`);
    if (!live && state !== 'CONNECTING') return this.done(slot, `not played: the device is ${state}`);
    const refusal = slotRefusal(live ? this.fw.config : this.config, slot, new Date());
    if (refusal) return this.done(slot, `not played: ${refusal}`);
    const rec = this.store.current();
    if (!rec) return this.done(slot, 'not played: no recording kept');
    if (!this.store.verified(rec)) return this.done(slot, `not played: ${rec.file} no longer hashes to its sha256`);
    this.fw.playLocal(`file://${rec.file}`, (h) => openFile(rec.file, rec.size, this.card, h), { reason: 'offline_fallback', prayer: slot.prayer, slot_at: slot.at });
    this.done(slot, `playing the recording ${rec.sha256.slice(0, 12)}… (no broadcast covered it by ${iso(slot.at + (this.plan?.grace_s ?? 0))})`);
  }
}
