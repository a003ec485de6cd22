/** The only place that reads the time. Milliseconds since the Unix epoch. */
export type Clock = () => number;

export const systemClock: Clock = () => Date.now();

export function toUnixSeconds(ms: number): number {
  return Math.floor(ms / 1000);
}

export function toIsoString(unixSeconds: number): string {
  return new Date(unixSeconds * 1000).toISOString();
}

/** A clock that only moves when told to: tests of expiry move it instead of sleeping. */
export function createManualClock(startMs = Date.UTC(2026, 0, 1)): Clock & { advance(ms: number): void; set(ms: number): void } {
  let now = startMs;
  const clock = (() => now) as Clock & { advance(ms: number): void; set(ms: number): void };
  clock.advance = (ms) => { now += ms; };
  clock.set = (ms) => { now = ms; };
  return clock;
}
