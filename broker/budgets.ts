/**
 * Per-device publish budgets (docs/firmware.md#2-what-the-broker-refuses-and-why): a token bucket per device and channel, answered from
 * memory with the time passed in. One map lookup per packet; nothing here touches the store or a clock.
 */
export type BudgetChannel = 'status' | 'heartbeat' | 'ack' | 'log' | 'broadcast';

export interface Rate {
  /** Tokens added per second. */
  perSecond: number;
  /** The bucket's size: how many may come at once after a quiet spell. */
  burst: number;
}

export type Rates = Record<BudgetChannel, Rate>;

/** A device sending more than this many times its rate, every second of the flood window, is flooding. */
export const FLOOD_FACTOR = 10;
const SECOND_MS = 1000;

export interface Bucket {
  tokens: number;
  atMs: number;
  /** Start of the current one-second window and the publishes counted in it (the flood rule). */
  windowStartMs: number;
  windowCount: number;
  /** Start of the unbroken run of flooded seconds, or null. */
  floodSinceMs: number | null;
}

/** ok: spend it; over: drop it (the connection stays); flood: over budget 10x for the whole flood window. */
export type Verdict = 'ok' | 'over' | 'flood';

export const newBucket = (rate: Rate, nowMs: number): Bucket => ({ tokens: rate.burst, atMs: nowMs, windowStartMs: nowMs, windowCount: 0, floodSinceMs: null });

/** Closes the one-second windows that ended before `nowMs`: a run of flooded seconds grows or breaks. */
function rollWindow(b: Bucket, rate: Rate, nowMs: number): void {
  const elapsed = nowMs - b.windowStartMs;
  if (elapsed < SECOND_MS) return;
  const flooded = b.windowCount > FLOOD_FACTOR * rate.perSecond;
  // A whole silent second in between is a second that was not flooded.
  const contiguous = elapsed < 2 * SECOND_MS;
  if (flooded && contiguous) b.floodSinceMs ??= b.windowStartMs;
  else b.floodSinceMs = null;
  b.windowStartMs = contiguous ? b.windowStartMs + SECOND_MS : nowMs;
  b.windowCount = 0;
}

/**
 * One publish against its bucket (mutated in place: this runs on every packet). The flood rule counts
 * every attempt, spent or dropped; it fires once `floodWindowMs` of whole flooded seconds lie behind.
 */
export function spend(b: Bucket, rate: Rate, nowMs: number, floodWindowMs: number): Verdict {
  rollWindow(b, rate, nowMs);
  b.windowCount++;
  // Math.max: a clock set back must not drain the bucket.
  b.tokens = Math.min(rate.burst, b.tokens + (Math.max(0, nowMs - b.atMs) * rate.perSecond) / SECOND_MS);
  b.atMs = nowMs;
  if (b.floodSinceMs !== null && b.windowStartMs - b.floodSinceMs >= floodWindowMs) return 'flood';
  if (b.tokens < 1) return 'over';
  b.tokens -= 1;
  return 'ok';
}

/** The buckets of every device that published since the process started, keyed by device id. */
export function createBudgets(rates: Rates, floodWindowMs: number) {
  const devices = new Map<string, Partial<Record<BudgetChannel, Bucket>>>();
  return {
    spend(deviceId: string, channel: BudgetChannel, nowMs: number): Verdict {
      let buckets = devices.get(deviceId);
      if (!buckets) devices.set(deviceId, (buckets = {}));
      const rate = rates[channel];
      const bucket = (buckets[channel] ??= newBucket(rate, nowMs));
      return spend(bucket, rate, nowMs, floodWindowMs);
    },
  };
}

export type Budgets = ReturnType<typeof createBudgets>;
