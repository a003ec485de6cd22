import type { OfferRow, OfferState } from './rollouts.ts';

/**
 * What a device's reported state says of its offer (docs/firmware.md, "4.4 Firmware updates"), read from its row
 * once per tick: pure, so each rule is a row of a table test.
 */
export interface ReportedState {
  status: string;
  /** The row's status_detail: {prev, reason, detail}. */
  status_detail: string;
  status_at: number | null;
  fw: string | null;
}

export type OfferMove = { state: OfferState; error?: string | null; progress_pct?: number | null; finished_at?: number | null; offered_at?: number | null };

/** docs/firmware.md, 4.4: STREAM_ERROR or CONFIG_ERROR this long after coming back on the new version fails it. */
export const AFTERCARE_S = 600;
const AWAY = new Set(['UPDATING', 'CONNECTING', 'OFFLINE']);

function detailOf(row: ReportedState): { reason: string | null; detail: Record<string, unknown> } {
  try {
    const parsed = JSON.parse(row.status_detail) as { reason?: unknown; detail?: unknown };
    const detail = parsed.detail && typeof parsed.detail === 'object' ? (parsed.detail as Record<string, unknown>) : {};
    return { reason: typeof parsed.reason === 'string' ? parsed.reason : null, detail };
  } catch {
    return { reason: null, detail: {} };
  }
}

/** The move an offer makes now (null: none), given its device's row (null: the device is gone) at `now` (Unix seconds). */
export function outcomeOf(offer: OfferRow, row: ReportedState | null, target: string, now: number, timeoutS: number): OfferMove | null {
  const done = (state: 'succeeded' | 'failed', error: string | null = null): OfferMove => ({ state, error, finished_at: now });
  if (!row) return offer.state === 'succeeded' || offer.state === 'failed' ? null : done('failed', 'device_deleted');
  const { reason, detail } = detailOf(row);
  const since = (at: number | null) => row.status_at !== null && at !== null && row.status_at >= at;
  if (offer.state === 'succeeded') {
    const recent = offer.finished_at !== null && now - offer.finished_at <= AFTERCARE_S;
    return recent && (row.status === 'STREAM_ERROR' || row.status === 'CONFIG_ERROR') && since(offer.finished_at) ? done('failed', row.status.toLowerCase()) : null;
  }
  if (offer.state === 'failed') return null;
  // Already there (updated some other way, or `already_installed`): nothing to offer.
  if (row.fw === target && !AWAY.has(row.status)) return done('succeeded');
  if (offer.state === 'waiting') return null;
  // A broadcast began while the image was downloading: the azaan won, the image is not at fault; offered again later.
  if (since(offer.offered_at) && reason === 'update_failed' && detail.error === 'interrupted') return { state: 'waiting', offered_at: null };
  if (since(offer.offered_at) && reason === 'update_failed') return done('failed', typeof detail.error === 'string' ? detail.error : 'update_failed');
  if (since(offer.offered_at) && reason === 'rolled_back') return done('failed', 'rolled_back');
  if (row.status === 'UPDATING') {
    const pct = typeof detail.progress_pct === 'number' ? Math.max(0, Math.min(100, Math.round(detail.progress_pct))) : offer.progress_pct;
    return offer.state === 'updating' && pct === offer.progress_pct ? timedOut(offer, now, timeoutS) : { state: 'updating', progress_pct: pct };
  }
  // Back from the update on another version: the image failed its own checks after the reboot.
  if (offer.state === 'updating' && !AWAY.has(row.status)) return done('failed', 'rolled_back');
  // PLAYING before it said UPDATING: it answered busy; offered again in a later window.
  if (offer.state === 'offered' && row.status === 'PLAYING') return { state: 'waiting', offered_at: null };
  return timedOut(offer, now, timeoutS);
}

function timedOut(offer: OfferRow, now: number, timeoutS: number): OfferMove | null {
  return offer.offered_at !== null && now - offer.offered_at > timeoutS ? { state: 'failed', error: 'timeout', finished_at: now } : null;
}
