/**
 * Reconnect flapping (docs/firmware.md#2-what-the-broker-refuses-and-why), after EMQX's flapping detection: more than `maxConnects`
 * CONNECTs of one device within `windowMs` and it is refused for `banMs`. From memory, time passed in.
 */
export interface FlapRule {
  maxConnects: number;
  windowMs: number;
  banMs: number;
}

export function createFlapDetector(rule: FlapRule) {
  /** Times of a device's accepted CONNECTs still inside the window (at most maxConnects of them). */
  const recent = new Map<string, number[]>();
  const bannedUntil = new Map<string, number>();

  function isBanned(id: string, nowMs: number): boolean {
    const until = bannedUntil.get(id);
    if (until === undefined) return false;
    if (nowMs < until) return true;
    bannedUntil.delete(id);
    return false;
  }

  return {
    isBanned,

    /** Counts a CONNECT that passed authentication; true when it is one too many (the ban starts now). */
    connect(id: string, nowMs: number): boolean {
      const times = (recent.get(id) ?? []).filter((at) => nowMs - at < rule.windowMs);
      times.push(nowMs);
      if (times.length <= rule.maxConnects) {
        recent.set(id, times);
        return false;
      }
      recent.delete(id);
      bannedUntil.set(id, nowMs + rule.banMs);
      return true;
    },

    /** Bans a device at once (a flood of publishes); true when it was not banned already. */
    ban(id: string, nowMs: number): boolean {
      const fresh = !isBanned(id, nowMs);
      if (fresh) {
        recent.delete(id);
        bannedUntil.set(id, nowMs + rule.banMs);
      }
      return fresh;
    },
  };
}

export type FlapDetector = ReturnType<typeof createFlapDetector>;
