/**
 * AudioLink: one stream kept open for a device (a player's HTTP GET of its stream address, a transmitter's
 * source connection to its mount), with the firmware's retry rule (docs/firmware.md#31-status-devicesidstatus-qos-1-retained):
 * the device is PLAYING only while bytes flow; when they stop (an error, the end of the stream, or nothing for
 * `stallMs`) it retries with backoff, and after 3 failed retries it reports STREAM_ERROR and keeps retrying, so
 * that PLAYING follows when a retry succeeds.
 *
 * The link decides nothing about device states: it calls onFlowing / onLost / onUnreachable and the device
 * (device/contract/firmware.ts) transitions.
 */

/** Failed retries before STREAM_ERROR (docs/firmware.md: "could not be reached after at least 3 retries"). */
export const RETRIES_BEFORE_ERROR = 3;

export interface AttemptHandlers {
  /** Audio bytes went through (received by a player, handed to the server by a transmitter). */
  bytes(n: number): void;
  /** This attempt is over; the link retries. Called at most once per attempt. */
  fail(error: string): void;
  /**
   * The audio is over for good, no retry (a local file played to its end, or one ffmpeg could not play: `error`).
   * A stream never ends this way: its end is a loss, retried.
   */
  end(error?: string): void;
}

export interface Attempt {
  close(): void;
}

export type Opener = (h: AttemptHandlers) => Attempt;

export interface AudioTiming {
  /** First retry delay; each next one doubles, up to retryMaxMs. */
  retryMs: number;
  retryMaxMs: number;
  /** No byte for this long (also before the first one) counts as a failed attempt; 0: no stall watch (a local file). */
  stallMs: number;
}

export const DEFAULT_AUDIO_TIMING: AudioTiming = { retryMs: 1000, retryMaxMs: 8000, stallMs: 5000 };

export interface AudioLinkEvents {
  /** The first bytes of an attempt: `restored` is false on the link's first success, true after a loss. */
  onFlowing(restored: boolean): void;
  /** Bytes were flowing and stopped; a retry follows. */
  onLost(error: string): void;
  /** RETRIES_BEFORE_ERROR retries in a row failed (once per outage); retrying goes on. */
  onUnreachable(error: string, retries: number): void;
  /** The opener ended the audio for good (AttemptHandlers.end): the link is closed. */
  onEnded?(error: string | undefined): void;
}

export interface AudioStats {
  stream_url: string;
  bytes: number;
  attempts: number;
  failures: number;
  flowing: boolean;
  last_error: string | null;
}

export class AudioLink {
  private attempt: Attempt | null = null;
  private flowing = false;
  private everFlowed = false;
  private reported = false;
  private closed = false;
  /** Failed attempts since bytes last flowed: the first is the loss (or the first try), the rest are retries. */
  private failuresInRow = 0;
  private stallTimer: NodeJS.Timeout | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private totalBytes = 0;
  private attempts = 0;
  private failures = 0;
  private lastError: string | null = null;

  constructor(
    /** The address as reported: no credentials, no query (a player's lease rides in it). */
    readonly streamUrl: string,
    private readonly open: Opener,
    private readonly timing: AudioTiming,
    private readonly events: AudioLinkEvents,
  ) {}

  get stats(): AudioStats {
    return {
      stream_url: this.streamUrl,
      bytes: this.totalBytes,
      attempts: this.attempts,
      failures: this.failures,
      flowing: this.flowing,
      last_error: this.lastError,
    };
  }

  start(): void {
    if (this.closed || this.attempt) return;
    this.attempts++;
    let over = false;
    const handlers: AttemptHandlers = {
      bytes: (n) => {
        if (over || this.closed) return;
        this.totalBytes += n;
        this.stallTimer?.refresh();
        if (this.flowing) return;
        this.flowing = true;
        this.failuresInRow = 0;
        this.reported = false;
        const restored = this.everFlowed;
        this.everFlowed = true;
        this.events.onFlowing(restored);
      },
      fail: (error) => {
        if (over || this.closed) return;
        over = true;
        this.onAttemptFailed(error);
      },
      end: (error) => {
        if (over || this.closed) return;
        over = true;
        this.close();
        this.events.onEnded?.(error);
      },
    };
    if (this.timing.stallMs > 0) this.stallTimer = setTimeout(() => handlers.fail(`no audio for ${this.timing.stallMs} ms (stalled)`), this.timing.stallMs);
    let opened: Attempt;
    try {
      opened = this.open(handlers);
    } catch (err) {
      handlers.fail(err instanceof Error ? err.message : String(err));
      return;
    }
    // An opener may fail at once (a bad address): that attempt is already over and a retry is scheduled.
    if (over || this.closed) opened.close();
    else this.attempt = opened;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.flowing = false;
    this.stopAttempt();
    if (this.retryTimer) clearTimeout(this.retryTimer);
    this.retryTimer = null;
  }

  private stopAttempt(): void {
    if (this.stallTimer) clearTimeout(this.stallTimer);
    this.stallTimer = null;
    const attempt = this.attempt;
    this.attempt = null;
    attempt?.close();
  }

  private onAttemptFailed(error: string): void {
    this.stopAttempt();
    this.failures++;
    this.failuresInRow++;
    this.lastError = error;
    const wasFlowing = this.flowing;
    this.flowing = false;
    if (wasFlowing) this.events.onLost(error);
    const retries = this.failuresInRow - 1;
    if (retries >= RETRIES_BEFORE_ERROR && !this.reported) {
      this.reported = true;
      this.events.onUnreachable(error, retries);
    }
    const delay = Math.min(this.timing.retryMaxMs, this.timing.retryMs * 2 ** Math.min(this.failuresInRow - 1, 16));
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      this.start();
    }, delay);
  }
}

/** A stream address fit for a status, a log line or a diag bundle: no user, password, query or fragment. */
export function publicStreamUrl(raw: string): string {
  try {
    const u = new URL(raw);
    u.username = '';
    u.password = '';
    u.search = '';
    u.hash = '';
    return u.toString();
  } catch {
    return raw.replace(/[?#].*$/s, '');
  }
}
