// Devices: a mosque's fleet (state filter, last seen, "offline for ...", signal, firmware, live) and one
// device (its facts, the why chain, diagnostic commands, set_log_level, timeline and log lines).
import { api } from '../api.js';
import { button, form, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { openLive } from '../live.js';
import { mosqueContext, mosqueHeader } from './admin.js';
import { historySection } from './super/firmware.js';
import { badge, durationText, playerBadge, seenText, whyText } from './why.js';

const COMMANDS = ['ping', 'identify', 'play_test', 'diag_bundle'];
const LOG_LEVELS = ['error', 'warn', 'info', 'debug'];
const MAX_LOG_TTL_S = 3600; // docs/firmware.md, "4.2 Commands": set_log_level's ttl_s <= 3600
const ERROR_STATES = new Set(['STREAM_ERROR', 'CONFIG_ERROR', 'ERROR']);
const TICK_MS = 1_000;

/**
 * The fleet filter (ESPHome #1370, zigbee2mqtt #12235). `stale` (3 missed heartbeats, no goodbye) is a
 * part of `offline`; `online` is every connected state that is neither an error nor "not entitled".
 */
const FILTERS = {
  all: () => true,
  online: (d) => !['OFFLINE', 'UNKNOWN', 'UNBOUND'].includes(d.status) && !ERROR_STATES.has(d.status),
  offline: (d) => d.status === 'OFFLINE',
  stale: (d) => d.status === 'OFFLINE' && d.status_detail?.reason === 'stale',
  error: (d) => ERROR_STATES.has(d.status),
  unbound: (d) => d.status === 'UNBOUND',
  never: (d) => d.status === 'UNKNOWN',
};

export async function fleetView(page, id) {
  const { mosque, canManage } = await mosqueContext(id);
  const liveState = h('p', { class: 'muted', role: 'status' }, t('live.connecting'));
  const select = h('select', { id: 'fleet-filter' });
  const summary = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  const list = h('ul', { class: 'list cards', 'aria-labelledby': 'dev-h' });
  let devices = [];
  const wanted = () => {
    const state = new URLSearchParams(location.search).get('state');
    return state in FILTERS ? state : 'all';
  };

  const draw = () => {
    const state = wanted();
    replace(select, Object.keys(FILTERS).map((k) => h('option', { value: k }, t('fleet.filter_option', { state: t(`fleet.state_${k}`), n: devices.filter(FILTERS[k]).length }))));
    select.value = state;
    const shown = devices.filter(FILTERS[state]);
    summary.textContent = t('fleet.showing', { n: shown.length, total: devices.length });
    replace(list, shown.length === 0 ? h('li', { class: 'muted' }, t(devices.length ? 'fleet.none_match' : 'admin.no_devices')) : shown.map(card));
    tick();
  };
  const load = async () => {
    devices = await api('GET', `/devices?mosque_id=${encodeURIComponent(id)}`);
    draw();
  };
  // The filter lives in the query, so a reload or Back from a device page shows the same list.
  select.addEventListener('change', () => {
    const url = new URL(location.href);
    if (select.value === 'all') url.searchParams.delete('state');
    else url.searchParams.set('state', select.value);
    history.replaceState(null, '', url.pathname + url.search);
    draw();
  });

  replace(page, mosqueHeader(mosque, '/devices', canManage), liveState,
    h('section', { 'aria-labelledby': 'dev-h' }, h('h2', { id: 'dev-h' }, t('admin.devices')),
      h('label', { for: 'fleet-filter' }, h('span', {}, t('fleet.filter'))), select, summary, list,
      canManage && pairForm({ heading: t('pair.add_transmitter'), mosques: [[mosque.id, mosque.name]], onPaired: load })));
  await load();
  // One timer for the page ticks every duration; the shell's cleanup clears it when the page is left.
  const timer = setInterval(tick, TICK_MS);
  const stopLive = openLive(id, liveState, { device_status: load });
  return () => {
    clearInterval(timer);
    stopLive();
  };
}

function card(d) {
  const offline = d.status === 'OFFLINE';
  const since = d.last_seen_at && h('span', { 'data-since': d.last_seen_at, 'data-offline': offline ? '1' : '' });
  return h('li', { 'data-device': d.id, class: 'card' },
    h('div', { class: 'row' }, h('a', { href: `/devices/${d.id}`, 'data-nav': '' }, d.name || d.id), badge(d.status),
      FILTERS.stale(d) && h('span', { class: 'badge stale' }, t('fleet.state_stale'))),
    h('dl', { class: 'facts' },
      h('dt', {}, t('device.kind')), h('dd', {}, t(`device.kind_${d.kind}`)),
      h('dt', {}, t(offline ? 'fleet.offline_for_label' : 'device.last_seen')), h('dd', {}, since || t('time.never_seen')),
      h('dt', {}, t('device.rssi')), h('dd', { 'data-rssi': d.rssi ?? '' }, d.rssi === null ? '—' : t(`signal.${signalQuality(d.rssi)}`)),
      h('dt', {}, t('fleet.fw')), h('dd', { 'data-fw': '' }, d.fw ?? '—')));
}

/**
 * Wi-Fi signal in words an imam knows (docs/console.md, "Plain words"): -67 dBm and stronger carries audio
 * steadily, -68 to -75 mostly does, weaker drops out. The device page adds the dBm for whoever fixes it.
 */
export function signalQuality(rssi) {
  return rssi >= -67 ? 'good' : rssi >= -75 ? 'fair' : 'weak';
}

/** Rewrites every "offline for ..." and "... ago" on the page from its timestamp. */
function tick() {
  for (const el of document.querySelectorAll('[data-since]')) {
    const seconds = (Date.now() - Date.parse(el.dataset.since)) / 1000;
    el.textContent = el.dataset.offline ? durationText(seconds) : t('fleet.ago', { duration: durationText(seconds) });
  }
}

export async function deviceView(page, id) {
  const result = h('pre', { role: 'status', 'aria-live': 'polite', class: 'card' }, t('device.no_result'));
  const body = h('div');
  const send = async (name, args) => {
    result.textContent = t('device.sending');
    const answer = await api('POST', `/devices/${id}/commands`, { name, ...(args && { args }), timeout_ms: 10000 });
    result.textContent = `${t(answer.ok ? 'event.command_done' : 'event.command_failed', { command: commandName(name), reason: '' })} (${answer.rtt_ms} ms)\n${JSON.stringify(answer.result ?? {}, null, 2)}`;
  };
  const load = async () => {
    const [d, why, events, logs, firmware] = await Promise.all([
      api('GET', `/devices/${id}`), api('GET', `/devices/${id}/why`), api('GET', `/devices/${id}/events?limit=30`), api('GET', `/devices/${id}/logs?limit=30`),
      historySection(id),
    ]);
    const facts = [['status', playerBadge(d, why.effective_playback_state !== 'unbound')], ['kind', t(`device.kind_${d.kind}`)], ['last_seen', `${when(d.last_seen_at)} (${seenText(d)})`],
      ['rssi', d.rssi === null || d.rssi === undefined ? '—' : t('signal.with_dbm', { quality: t(`signal.${signalQuality(d.rssi)}`), rssi: d.rssi })], ['fw', d.fw ?? '—'], ['ip', d.ip ?? '—'], ['uptime', d.uptime_s ?? '—']];
    replace(body,
      h('h1', {}, d.name || d.id),
      h('section', { 'aria-labelledby': 'why-h' }, h('h2', { id: 'why-h' }, t('device.why')), h('p', { class: 'why' }, whyText(why, d))),
      h('section', { 'aria-labelledby': 'facts-h' }, h('h2', { id: 'facts-h' }, t('device.facts')),
        h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, t(`device.${k}`)), h('dd', {}, v)]))),
      h('section', { 'aria-labelledby': 'cmd-h' }, h('h2', { id: 'cmd-h' }, t('device.commands')),
        h('div', { class: 'row' }, COMMANDS.map((name) => button(t(`command.${name}`), () => send(name), (message) => { result.textContent = message; }, { class: 'secondary' }))),
        // docs/firmware.md, "4.2 Commands": set_log_level is a stream player's command; a transmitter logs by its log_enabled setting.
        d.kind === 'stream_player' && logLevelForm(send),
        result),
      firmware,
      h('section', { 'aria-labelledby': 'tl-h' }, h('h2', { id: 'tl-h' }, t('device.timeline')),
        h('ul', { class: 'list' }, events.length === 0 ? h('li', { class: 'muted' }, '—') : events.map((e) => h('li', { 'data-event': e.kind },
          h('span', { class: 'muted' }, when(e.at)), ' ', eventText(e))))),
      h('section', { 'aria-labelledby': 'log-h' }, h('h2', { id: 'log-h' }, t('device.logs')),
        (logs.lines ?? []).length === 0 ? h('p', { class: 'muted' }, t('device.no_logs')) : h('pre', {}, logs.lines.map((l) => `${when(l.at)} ${l.level} ${l.msg}\n`))));
  };
  replace(page, body);
  await load();
}

/** A name from the catalogue, or a neutral word when this console does not know it (a newer device or service). */
const known = (key, otherKey, vars) => (t(key, vars) === key ? t(otherKey, vars) : t(key, vars));
const commandName = (name) => known(`command.${name}`, 'command.other');
const statusWord = (status) => (status ? known(`status.${status}`, 'status.other') : t('status.UNKNOWN'));
const reasonWord = (reason) => known(`reason.${reason}`, 'reason.other');

/**
 * One timeline entry (docs/api.md, "Devices, from the app's side") in the console's own words: the statuses of the
 * badges, the command names of the buttons, the reasons as the why chain says them; never the wire's names.
 */
export function eventText(e) {
  const command = commandName(e.detail?.name ?? '');
  const vars = { from: statusWord(e.from), to: statusWord(e.to), command, reason: e.reason ? reasonWord(e.reason) : '' };
  let key = `event.${e.kind}`;
  if (e.kind === 'command_acked') key = e.detail?.ok === false ? 'event.command_failed' : 'event.command_done';
  else if (e.kind === 'status' && !e.from) key = 'event.status_first';
  const text = known(key, 'event.other', vars);
  // The reason (why a config changed, why a connection ended, what a player said of its new status), when there is one.
  return e.reason ? `${text} ${t('event.because', { reason: vars.reason })}` : text;
}

/** Log lines for a while: the page checks the range first (the API checks it again: 1..3600 s). */
function logLevelForm(send) {
  return form({ 'aria-labelledby': 'log-level-h', novalidate: true }, [
    h('h3', { id: 'log-level-h' }, t('fleet.log_level_title')),
    h('label', {}, h('span', {}, t('fleet.log_level')), h('select', { name: 'level' }, LOG_LEVELS.map((l) => h('option', { value: l }, t(`fleet.level_${l}`))))),
    h('label', {}, h('span', {}, t('fleet.log_ttl')),
      h('input', { name: 'ttl_s', type: 'number', inputmode: 'numeric', min: 1, max: MAX_LOG_TTL_S, step: 1, value: 600, required: true })),
    h('button', { type: 'submit', class: 'secondary' }, t('fleet.log_level_send')),
  ], async (data) => {
    const ttl = Number(data.get('ttl_s'));
    if (!Number.isInteger(ttl) || ttl < 1 || ttl > MAX_LOG_TTL_S) throw new Error(t('fleet.log_ttl_invalid', { max: MAX_LOG_TTL_S }));
    await send('set_log_level', { level: data.get('level'), ttl_s: ttl });
  });
}

/**
 * Pairing a device by the code it shows (docs/api.md, "Pairing a device"): the code, where it goes (a player: one of
 * the person's mosques that takes them; a transmitter: the mosque whose Devices tab this is), an optional name.
 * `mosques` is [[id, name]]; one entry is chosen without a select. Refusals show the API's own message.
 */
export function pairForm({ heading, mosques, code = '', onPaired }) {
  const id = `pair-h-${heading.length}`;
  const where = mosques.length === 1
    ? h('input', { type: 'hidden', name: 'mosque_id', value: mosques[0][0] })
    : h('label', {}, h('span', {}, t('pair.mosque')), h('select', { name: 'mosque_id', required: true },
      mosques.map(([value, name]) => h('option', { value }, name))));
  const done = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  return form({ 'aria-labelledby': id, 'data-pair': '' }, [
    h('h3', { id }, heading),
    h('p', { class: 'muted' }, t('pair.hint')),
    h('label', {}, h('span', {}, t('pair.code')), h('input', { name: 'user_code', value: code, required: true, autocomplete: 'off', autocapitalize: 'characters', spellcheck: 'false', maxlength: 32, dir: 'ltr', placeholder: 'XXXX-XXXX' })),
    where,
    h('label', {}, h('span', {}, t('pair.name')), h('input', { name: 'name', maxlength: 60 })),
    h('button', { type: 'submit' }, t('pair.button')),
    done,
  ], async (data) => {
    const name = String(data.get('name') ?? '').trim();
    const body = { user_code: String(data.get('user_code')), mosque_id: String(data.get('mosque_id')), ...(name && { name }) };
    // The API's own words for a refused code or a full account: they say what to check, which a generic "not found" does not.
    const { device } = await api('POST', '/devices/pairing/approve', body).catch((err) => {
      throw (err.status === 404 || err.status === 409) && err.serverMessage ? new Error(err.serverMessage) : err;
    });
    done.textContent = t('pair.done', { name: device.name || device.id });
    await onPaired?.(device);
  });
}

/** /pair?code=XXXX-XXXX, verification_uri_complete: a signed-out visitor signs in first and lands back here. */
export async function pairView(page) {
  const [me, mosques] = await Promise.all([api('GET', '/me'), api('GET', '/mosques')]);
  const names = new Map(mosques.map((m) => [m.id, m.name]));
  const places = new Map();
  for (const m of me.memberships) if (m.status === 'pending' || m.status === 'approved') places.set(m.mosque_id, names.get(m.mosque_id) ?? m.mosque_id);
  for (const a of me.admin_of) if (a.can_manage) places.set(a.mosque_id, names.get(a.mosque_id) ?? a.mosque_id);
  const code = new URLSearchParams(location.search).get('code') ?? '';
  replace(page, h('h1', {}, t('pair.title')),
    places.size === 0 ? h('p', { class: 'muted' }, t('pair.no_mosque'))
      : pairForm({ heading: t('pair.add_device'), mosques: [...places], code}));
}
