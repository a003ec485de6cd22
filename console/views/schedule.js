// The azaan schedule: a mosque admin's day of slots (status, readiness, auto start, alerts) kept live by the
// event stream, and the member's "today's prayer times" with a countdown. Times are shown in the mosque's zone.
import { api } from '../api.js';
import { h, replace } from '../dom.js';
import { language, t } from '../i18n.js';
import { openLive } from '../live.js';

/** A card whose day is over is read again, at most this often (a phone whose clock is far off would ask every second). */
const REREAD_MS = 60_000;
const REPORT_PARTS = ['playing', 'unbound', 'muted', 'offline', 'stream_error', 'other'];
const ALERTED = new Set(['not_ready', 'missed']);

const formatters = new Map();
/** Intl formatters are costly to build and the countdown asks every second: one per language, zone and kind. */
function formatter(kind, timeZone) {
  const key = `${language()}|${timeZone}|${kind}`;
  if (!formatters.has(key)) {
    const options = {
      time: { timeZone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' },
      day: { timeZone, weekday: 'long', day: 'numeric', month: 'long' },
      iso: { timeZone, year: 'numeric', month: '2-digit', day: '2-digit' },
    }[kind];
    // en-CA writes dates as YYYY-MM-DD, the API's date format, whatever the page's language.
    formatters.set(key, new Intl.DateTimeFormat(kind === 'iso' ? 'en-CA' : language(), options));
  }
  return formatters.get(key);
}
const timeIn = (iso, tz) => (iso ? formatter('time', tz).format(new Date(iso)) : '—');
/** A calendar date (YYYY-MM-DD) in words; noon UTC names the same day everywhere. */
const dayName = (date) => formatter('day', 'UTC').format(new Date(`${date}T12:00:00Z`));
/** Today on the mosque's calendar, as the API writes dates. */
export const todayIn = (tz, now = Date.now()) => formatter('iso', tz).format(new Date(now));

/** 01:23:05 in the page's digits. */
function countdown(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  const n = new Intl.NumberFormat(language(), { minimumIntegerDigits: 2, useGrouping: false });
  return `${n.format(Math.floor(s / 3600))}:${n.format(Math.floor((s % 3600) / 60))}:${n.format(s % 60)}`;
}

// ---- the member's today card ----

/**
 * Today's prayer times of one mosque (today and tomorrow are read, so after Isha the countdown runs to the
 * next Fajr). Returns the card and `tick(now)`, which the page calls once a second from its one timer;
 * tick answers true when the card's day is over and it should be read again.
 */
export function prayerCard(mosque, slots) {
  const tz = mosque.timezone;
  const card = h('div', { class: 'card', 'data-prayer-card': mosque.id }, h('h3', {}, mosque.name));
  if (slots.length === 0) {
    card.append(h('p', { class: 'muted' }, t('prayer.not_set_up')));
    return { card, tick: () => false };
  }
  const today = slots[0].date;
  const rows = new Map();
  const todays = slots.filter((s) => s.date === today);
  const next = h('p', { role: 'timer', 'aria-atomic': 'true', 'data-countdown': '' });
  card.append(
    h('p', { class: 'muted' }, t('prayer.today', { day: dayName(today) })),
    h('table', {},
      h('thead', {}, h('tr', {}, h('th', { scope: 'col' }, t('prayer.prayer')), h('th', { scope: 'col' }, t('prayer.azaan')), h('th', { scope: 'col' }, t('prayer.iqamah')))),
      h('tbody', {}, todays.map((s) => {
        const row = h('tr', { 'data-prayer': s.prayer }, h('th', { scope: 'row' }, t(`prayer.${s.prayer}`)), h('td', {}, timeIn(s.azaan_at, tz)), h('td', {}, timeIn(s.iqamah_at, tz)));
        rows.set(s, row);
        return row;
      }))),
    next);
  let shown = null;
  const tick = (now) => {
    const upcoming = slots.find((s) => Date.parse(s.azaan_at) > now) ?? null;
    if (upcoming !== shown) {
      rows.get(shown)?.removeAttribute('aria-current');
      rows.get(upcoming)?.setAttribute('aria-current', 'true');
      shown = upcoming;
    }
    next.textContent = upcoming
      ? t(upcoming.date === today ? 'prayer.next' : 'prayer.next_tomorrow', { prayer: t(`prayer.${upcoming.prayer}`), time: timeIn(upcoming.azaan_at, tz), in: countdown(Date.parse(upcoming.azaan_at) - now) })
      : t('prayer.none_left');
    return upcoming === null || todayIn(tz, now) !== today;
  };
  tick(Date.now());
  return { card, tick };
}

/** The member's prayer-times section: one card per approved membership, read again when a day ends. */
export function prayerSection(mosques) {
  const cards = h('div');
  const section = h('section', { 'aria-labelledby': 'prayer-h' }, h('h2', { id: 'prayer-h' }, t('prayer.title')), cards);
  let ticks = [];
  let reading = false;
  let readAt = 0;
  const load = async () => {
    reading = true;
    readAt = Date.now();
    try {
      const built = await Promise.all(mosques.map(async (m) => {
        try {
          return prayerCard(m, await api('GET', `/mosques/${m.id}/schedule?days=2`));
        } catch (err) {
          return { card: h('div', { class: 'card' }, h('h3', {}, m.name), h('p', { class: 'error' }, err.message)), tick: () => false };
        }
      }));
      ticks = built.map((b) => b.tick);
      replace(cards, built.map((b) => b.card));
    } finally {
      reading = false;
    }
  };
  if (mosques.length === 0) cards.append(h('p', { class: 'muted' }, t('prayer.no_mosque')));
  return {
    section,
    load: () => (mosques.length === 0 ? Promise.resolve() : load()),
    /** Called once a second by the page's one timer. */
    tick(now) {
      const stale = ticks.map((tick) => tick(now)).some(Boolean);
      if (stale && !reading && now - readAt >= REREAD_MS) void load().catch(() => {});
    },
  };
}

// ---- the admin's schedule page ----

function slotItem(s, mosque) {
  const tz = mosque.timezone;
  const readiness = s.readiness;
  const connected = readiness?.transmitters?.filter((x) => x.connected).length ?? 0;
  const auto = s.auto_started ? t('schedule.auto_started') : mosque.auto_start ? t('schedule.auto_start_on') : t('schedule.auto_start_off');
  return h('li', { 'data-slot': `${s.prayer}-${s.azaan_local}` },
    h('div', { class: 'row' },
      h('strong', {}, t(`prayer.${s.prayer}`)), h('span', {}, timeIn(s.azaan_at, tz)),
      h('span', { class: `badge ${s.status}` }, t(`schedule.status_${s.status}`))),
    h('p', { class: 'muted' }, [
      s.iqamah_at && t('schedule.iqamah_at', { time: timeIn(s.iqamah_at, tz) }), t(`schedule.source_${s.source}`), auto,
    ].filter(Boolean).join(' · ')),
    readiness && h('p', {}, t('schedule.readiness', { connected, transmitters: readiness.transmitters?.length ?? 0, players: readiness.players_ready ?? 0 })),
    ALERTED.has(s.status) && s.reason !== 'not_checked' && h('p', { class: 'error', 'data-alert': s.status === 'missed' ? 'azaan_missed' : 'azaan_not_ready' },
      t(s.status === 'missed' ? 'schedule.alert_missed' : 'schedule.alert_not_ready', { reason: t(`schedule.reason_${s.reason ?? 'not_started'}`) })),
    s.reason === 'not_checked' && h('p', { class: 'muted' }, t('schedule.reason_not_checked')),
    s.report && h('dl', { class: 'facts', 'aria-label': t('broadcast.report') },
      REPORT_PARTS.map((k) => [h('dt', {}, t(`report.${k}`)), h('dd', {}, String(s.report[k]))])));
}

/** /mosques/{id}/schedule: the day's slots, a date picker, live through the mosque's event stream. */
export async function scheduleView(page, id) {
  const mosque = await api('GET', `/mosques/${id}`);
  let date = todayIn(mosque.timezone);
  const slots = h('ul', { class: 'list' });
  const heading = h('h2', { id: 'day-h' });
  const liveState = h('p', { class: 'muted', role: 'status' }, t('live.connecting'));
  const picker = h('input', { type: 'date', value: date, required: true });

  const load = async () => {
    const list = await api('GET', `/mosques/${id}/schedule?date=${encodeURIComponent(date)}`);
    heading.textContent = date === todayIn(mosque.timezone) ? t('prayer.today', { day: dayName(date) }) : dayName(date);
    replace(slots, list.length === 0 ? h('li', { class: 'muted' }, t('schedule.not_set_up')) : list.map((s) => slotItem(s, mosque)));
  };
  picker.addEventListener('change', () => {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(picker.value)) return;
    date = picker.value;
    void load().catch((err) => { liveState.textContent = err.message; });
  });

  replace(page,
    h('p', {}, h('a', { href: `/mosques/${id}`, 'data-nav': '' }, t('schedule.back', { mosque: mosque.name }))),
    h('h1', {}, t('schedule.title', { mosque: mosque.name })),
    liveState,
    h('section', { 'aria-labelledby': 'day-h' }, heading,
      h('label', {}, h('span', {}, t('schedule.day')), picker),
      h('p', { class: 'muted' }, t('schedule.zone', { zone: mosque.timezone })),
      slots));
  await load();
  // A slot's status moves with the ready check, a start, the missed check and a stop: read the day again.
  return openLive(id, liveState, { schedule: load, broadcast: load });
}
