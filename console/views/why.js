// The `why` chain of GET /devices/{id}/why in plain words, and status badges shared by the pages.
import { h } from '../dom.js';
import { ago, t, when } from '../i18n.js';

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

/** "offline for 3 hours" / "seen 2 minutes ago". */
export function seenText(device) {
  if (!device.last_seen_at) return t('time.never_seen');
  return device.status === 'OFFLINE' ? t('device.offline_for', { ago: ago(device.last_seen_at) }) : t('device.seen', { ago: ago(device.last_seen_at) });
}
