// The `why` chain of GET /devices/{id}/why in plain words, and status badges shared by the pages.
import { h } from '../dom.js';
import { ago, language, t, when } from '../i18n.js';

export function whyText(why, device) {
  const state = why.effective_playback_state;
  if (state === 'offline' || state === 'unknown') {
    const tx = device.kind === 'transmitter' ? 'tx_' : '';
    return device.last_seen_at ? t(`why.${tx}offline_since`, { since: when(device.last_seen_at) }) : t(`why.${tx}never_seen`);
  }
  if (state === 'unbound') return t(`why.${why.reason}`) === `why.${why.reason}` ? t('why.unbound', { reason: why.reason }) : t(`why.${why.reason}`);
  if (state === 'error') return t('why.error', { error: why.reason });
  return t(`state.${state}`);
}

export const badge = (value, label = value) => h('span', { class: `badge ${value}` }, t(`status.${label}`) === `status.${label}` ? label : t(`status.${label}`));

/**
 * A player's badge beside the words on whether it may play: one the API says is not entitled (banned, removed,
 * waiting) says "Not entitled", whatever it last reported (its PLAYING may predate the ban by a moment).
 */
export function playerBadge(device, entitled) {
  const connected = !['OFFLINE', 'UNKNOWN'].includes(device.status);
  return badge(device.kind === 'stream_player' && entitled === false && connected ? 'UNBOUND' : device.status);
}

/** "offline for 3 hours" / "seen 2 minutes ago". */
export function seenText(device) {
  if (!device.last_seen_at) return t('time.never_seen');
  return device.status === 'OFFLINE' ? t('device.offline_for', { ago: ago(device.last_seen_at) }) : t('device.seen', { ago: ago(device.last_seen_at) });
}

/** "3 h 12 min" from seconds, in the current language's digits; coarser as it grows (a fleet list, not a stopwatch). */
export function durationText(seconds) {
  const n = (x) => new Intl.NumberFormat(language()).format(x);
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return t('fleet.dur_s', { s: n(s) });
  if (s < 3600) return t('fleet.dur_m', { m: n(Math.floor(s / 60)) });
  if (s < 86400) return t('fleet.dur_hm', { h: n(Math.floor(s / 3600)), m: n(Math.floor((s % 3600) / 60)) });
  return t('fleet.dur_dh', { d: n(Math.floor(s / 86400)), h: n(Math.floor((s % 86400) / 3600)) });
}
