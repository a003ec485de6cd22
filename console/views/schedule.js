// The azaan schedule: a mosque admin's day of slots (status, readiness, auto start, alerts) kept live by the
// event stream, and the member's "today's prayer times" with a countdown. Times are shown in the mosque's zone.
import { api, apiUpload } from '../api.js';
import { button, form, h, replace } from '../dom.js';
import { language, t, when } from '../i18n.js';
import { openLive } from '../live.js';
import { mosqueContext } from './admin.js';

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

// ---- the recorded azaan (docs/api.md, "Recorded azaan") ----

/** What the upload may be sent as, by file name: a browser may give a .opus file no type, or audio/ogg. */
const RECORDING_TYPES = { mp3: 'audio/mpeg', ogg: 'audio/ogg', opus: 'audio/opus' };
const ACCEPTED = new Set(Object.values(RECORDING_TYPES));
/** RECORDING_MAX_BYTES as the service wrote it into the page; the service's default when it did not. */
const recordingMaxBytes = () => Number(document.querySelector('meta[name="minaret-recording-max-bytes"]')?.getAttribute('content')) || 5 * 1024 * 1024;

function typeOfFile(file) {
  const byName = RECORDING_TYPES[file.name.split('.').pop()?.toLowerCase() ?? ''];
  return ACCEPTED.has(file.type) && byName ? file.type : byName ?? null;
}

/** 24 KB, 4.8 MB: sizes as people read them (powers of 1024, as the limit is set), in the page's digits. */
function sizeText(bytes) {
  const mb = bytes >= 1024 * 1024;
  return new Intl.NumberFormat(language(), { style: 'unit', unit: mb ? 'megabyte' : 'kilobyte', maximumFractionDigits: 1 })
    .format(bytes / (mb ? 1024 * 1024 : 1024));
}

/** 3:05 (minutes and seconds), in the page's digits. */
function lengthText(seconds) {
  const s = Math.round(seconds);
  const n = new Intl.NumberFormat(language(), { minimumIntegerDigits: 2, useGrouping: false });
  return `${new Intl.NumberFormat(language()).format(Math.floor(s / 60))}:${n.format(s % 60)}`;
}

const formatName = (contentType) => (contentType === 'audio/mpeg' ? 'MP3' : contentType.includes('opus') ? 'Opus' : 'Ogg Vorbis');

/** Why the service refused a file, in the page's language where it can be. */
function refusal(err) {
  if (err.code === 'payload_too_large') return t('recording.too_large', { max: sizeText(recordingMaxBytes()) });
  if (err.code === 'unsupported_media_type') return t('recording.wrong_type');
  if (err.code === 'validation_failed' && err.serverMessage) return t('recording.refused', { why: err.serverMessage });
  return err.message;
}

/**
 * The mosque's recorded azaan: its length, size and format for every admin; a manager uploads a file (checked
 * here for its size and kind first, so a file too large is never sent) or deletes it.
 */
function recordingSection(id, canManage) {
  const facts = h('p', { 'data-recording': '' });
  const done = h('p', { role: 'status' });
  const report = h('p', { class: 'error', role: 'alert' });
  const show = (rec) => {
    replace(facts, rec
      ? t('recording.facts', { length: lengthText(rec.duration_s), size: sizeText(rec.bytes), format: formatName(rec.content_type), when: when(rec.uploaded_at) })
      : t('recording.none'));
    remove.hidden = !rec;
  };
  const load = async () => {
    try {
      show(await api('GET', `/mosques/${id}/recording`));
    } catch (err) {
      if (err.code !== 'not_found') throw err;
      show(null);
    }
  };
  const input = h('input', { type: 'file', name: 'file', accept: '.mp3,.ogg,.opus,audio/mpeg,audio/ogg,audio/opus', required: true });
  const upload = form({ 'aria-label': t('recording.upload') }, [
    h('label', {}, h('span', {}, t('recording.file')), input),
    h('button', { type: 'submit' }, t('recording.upload')),
  ], async () => {
    done.textContent = '';
    report.textContent = '';
    const file = input.files?.[0];
    if (!file) throw new Error(t('recording.choose'));
    const type = typeOfFile(file);
    if (!type) throw new Error(t('recording.wrong_type'));
    if (file.size > recordingMaxBytes()) throw new Error(t('recording.too_large_local', { size: sizeText(file.size), max: sizeText(recordingMaxBytes()) }));
    let rec;
    try {
      rec = await apiUpload('PUT', `/mosques/${id}/recording`, file, type);
    } catch (err) {
      throw new Error(refusal(err));
    }
    show(rec);
    input.value = '';
    done.textContent = t('recording.saved');
  });
  const remove = button(t('recording.delete'), async () => {
    if (!window.confirm(t('recording.delete_confirm'))) return;
    done.textContent = '';
    report.textContent = '';
    await api('DELETE', `/mosques/${id}/recording`);
    show(null);
    done.textContent = t('recording.deleted');
  }, (message) => { report.textContent = message; }, { class: 'danger' });
  remove.hidden = true;
  const section = h('section', { 'aria-labelledby': 'rec-h', 'data-recording-section': '' },
    h('h2', { id: 'rec-h' }, t('recording.title')),
    h('p', { class: 'muted' }, t('recording.about', { max: sizeText(recordingMaxBytes()) })),
    facts,
    canManage && upload, canManage && remove, done, report);
  return { section, load };
}

/** /mosques/{id}/schedule: the day's slots, a date picker, live through the mosque's event stream. */
export async function scheduleView(page, id) {
  const { mosque, canManage } = await mosqueContext(id);
  let date = todayIn(mosque.timezone);
  const slots = h('ul', { class: 'list' });
  const heading = h('h2', { id: 'day-h' });
  const liveState = h('p', { class: 'muted', role: 'status' }, t('live.connecting'));
  const picker = h('input', { type: 'date', value: date, required: true });

  const load = async () => {
    const list = await api('GET', `/mosques/${id}/schedule?date=${encodeURIComponent(date)}`);
    heading.textContent = date === todayIn(mosque.timezone) ? t('prayer.today', { day: dayName(date) }) : dayName(date);
    replace(slots, list.length === 0 ? h('li', { class: 'muted', 'data-not-set-up': '' }, t('schedule.not_set_up'),
      // A manager can fix it: the settings page holds the location, method and timetable.
      canManage && [' ', h('a', { href: `/mosques/${id}/settings`, 'data-nav': '' }, t('schedule.set_up_link'))]) : list.map((s) => slotItem(s, mosque)));
  };
  picker.addEventListener('change', () => {
    if (!/^\d{4}-\d{2}-\d{2}$/.test(picker.value)) return;
    date = picker.value;
    void load().catch((err) => { liveState.textContent = err.message; });
  });

  const recording = recordingSection(id, canManage);
  replace(page,
    h('p', {}, h('a', { href: `/mosques/${id}`, 'data-nav': '' }, t('schedule.back', { mosque: mosque.name }))),
    h('h1', {}, t('schedule.title', { mosque: mosque.name })),
    liveState,
    h('section', { 'aria-labelledby': 'day-h' }, heading,
      h('label', {}, h('span', {}, t('schedule.day')), picker),
      h('p', { class: 'muted' }, t('schedule.zone', { zone: mosque.timezone })),
      slots),
    recording.section);
  await Promise.all([load(), recording.load()]);
  // A slot's status moves with the ready check, a start, the missed check and a stop: read the day again.
  return openLive(id, liveState, { schedule: load, broadcast: load });
}
