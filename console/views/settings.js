// The mosque's settings page (docs/console.md, "The settings page: decisions"): everything PATCH /mosques/{id}, the
// timetable routes and the join code route take, for the mosque's managers. Each form sends only what changed
// and says what was saved; a refusal shows the API's reason next to the form that caused it.
import { api, apiUpload, fieldProblems } from '../api.js';
import { button, field, form, h, replace } from '../dom.js';
import { language, t } from '../i18n.js';
import { joinLink } from '../qr.js';
import { mosqueContext, mosqueHeader } from './admin.js';

const PRAYERS = ['fajr', 'dhuhr', 'asr', 'maghrib', 'isha'];
// The methods and rules the API accepts (src/mosques/mosques.ts CALCULATION_METHODS, HIGH_LATITUDE_RULES).
const METHODS = ['muslim_world_league', 'egyptian', 'karachi', 'umm_al_qura', 'dubai', 'qatar', 'kuwait',
  'moonsighting_committee', 'singapore', 'turkey', 'tehran', 'north_america', 'other'];
const HIGH_LATITUDE_RULES = ['middle_of_the_night', 'seventh_of_the_night', 'twilight_angle'];
const TIMETABLE_COLUMNS = { day: 'timetable.col_day', shuruk: 'timetable.col_shuruk', ...Object.fromEntries(PRAYERS.map((p) => [p, `prayer.${p}`])) };
const MAX_JUMUAH = 6;

let zoneCount = 0;
let zones = null;
/**
 * A time zone field that searches as one types: an <input list> over the browser's IANA zones (a native
 * control, so keyboards and screen readers need nothing of ours). UTC leads, as the API's default.
 */
export function zoneField(label, attrs) {
  zones ??= ['UTC', ...(Intl.supportedValuesOf?.('timeZone') ?? []).filter((z) => z !== 'UTC')];
  const id = `zones-${++zoneCount}`;
  return [
    h('label', {}, h('span', {}, label), h('input', { ...attrs, list: id, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `${id}-hint` })),
    h('p', { id: `${id}-hint`, class: 'muted' }, t('settings.zone_hint')),
    h('datalist', { id }, zones.map((z) => h('option', { value: z }))),
  ];
}

/** The browser's own zone: where a superadmin sets a mosque up is usually where it is. */
export const browserZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone || 'UTC';

const listText = (items) => new Intl.ListFormat(language(), { type: 'conjunction' }).format(items);
const whatOf = (key) => t(`settings.what_${key}`);

/** Why the API refused, in plain words: each field it named with its reason, or the catalogue's text. */
function refusal(err) {
  // The fields and reasons as every form words them (console/api.js); a nested path keeps its tail.
  const named = err.code === 'validation_failed' ? fieldProblems(err.details) : [];
  return named.length === 0 ? err.message : t('settings.refused', { why: named.join('; ') });
}

/**
 * A settings form: `read(data)` gives the fields as the API names them; only those that differ from the saved
 * mosque are sent. The form's status line says what was saved, its alert line why the API refused.
 */
function settingsForm(state, attrs, children, read) {
  const status = h('p', { role: 'status', 'data-saved': '' });
  const el = form({ ...attrs, novalidate: true }, [children, status], async (data) => {
    status.textContent = '';
    const wanted = read(data);
    const changed = Object.fromEntries(Object.entries(wanted).filter(([k, v]) => JSON.stringify(v) !== JSON.stringify(state.mosque[k])));
    if (Object.keys(changed).length === 0) {
      status.textContent = t('settings.nothing_changed');
      return;
    }
    try {
      state.mosque = await api('PATCH', `/mosques/${state.mosque.id}`, changed);
    } catch (err) {
      throw new Error(refusal(err));
    }
    const what = [...new Set(Object.keys(changed).map((k) => (k === 'latitude' || k === 'longitude' ? 'location' : k)))];
    status.textContent = t('settings.saved', { what: listText(what.map(whatOf)) });
  });
  return el;
}

const numberOrNull = (raw) => (String(raw ?? '').trim() === '' ? null : Number(String(raw).trim()));

// ---- name and members ----

function generalSection(state) {
  const m = state.mosque;
  return h('section', { 'aria-labelledby': 'set-gen-h' }, h('h2', { id: 'set-gen-h' }, t('settings.general')),
    settingsForm(state, { 'aria-labelledby': 'set-gen-h' }, [
      field(t('settings.name'), { name: 'name', value: m.name, required: true, maxlength: 200 }),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'auto', checked: m.auto_approve_members }), t('settings.auto_approve')),
      h('p', { class: 'muted' }, t('settings.auto_approve_hint')),
      h('button', { type: 'submit' }, t('settings.save')),
    ], (data) => ({ name: String(data.get('name') ?? '').trim(), auto_approve_members: data.get('auto') === 'on' })));
}

// ---- place, method and the preview ----

function prayerTimesOf(data) {
  const method = String(data.get('method') ?? '');
  if (!method) return null;
  const angle = (name) => numberOrNull(data.get(name));
  const adjustments = Object.fromEntries(PRAYERS.map((p) => [p, numberOrNull(data.get(`adjust_${p}`))]).filter(([, v]) => v !== null && v !== 0));
  const rule = String(data.get('high_latitude_rule') ?? '');
  return {
    method, madhab: data.get('madhab') === 'hanafi' ? 'hanafi' : 'shafi',
    ...(rule && { high_latitude_rule: rule }),
    ...(angle('fajr_angle') !== null && { fajr_angle: angle('fajr_angle') }),
    ...(angle('isha_angle') !== null && { isha_angle: angle('isha_angle') }),
    ...(Object.keys(adjustments).length > 0 && { adjustments }),
  };
}

function placeOf(data) {
  const latitude = numberOrNull(data.get('latitude'));
  const longitude = numberOrNull(data.get('longitude'));
  // One without the other computes nothing (src/schedule/slots.ts computedStarts): say so before sending.
  if ((latitude === null) !== (longitude === null)) throw new Error(t('settings.both_coordinates'));
  return { timezone: String(data.get('timezone') ?? '').trim(), latitude, longitude, prayer_times: prayerTimesOf(data) };
}

function select(name, value, options, label) {
  return h('label', {}, h('span', {}, label), h('select', { name }, options.map(([v, text]) => h('option', { value: v, selected: v === value }, text))));
}

/** The device's location into the two fields; a refusal (permission, no fix, no https) is said plainly. */
function locateButton(latInput, lonInput, status) {
  return button(t('settings.use_location'), () => new Promise((resolve) => {
    status.textContent = '';
    if (!navigator.geolocation || !window.isSecureContext) {
      status.textContent = t('settings.geo_unsupported');
      return resolve();
    }
    status.textContent = t('settings.geo_asking');
    navigator.geolocation.getCurrentPosition((pos) => {
      latInput.value = pos.coords.latitude.toFixed(4);
      lonInput.value = pos.coords.longitude.toFixed(4);
      status.textContent = t('settings.geo_found', { metres: Math.round(pos.coords.accuracy) });
      resolve();
    }, (err) => {
      status.textContent = t(err.code === 1 ? 'settings.geo_denied' : err.code === 3 ? 'settings.geo_timeout' : 'settings.geo_unavailable');
      resolve();
    }, { timeout: 20_000, maximumAge: 600_000 });
  }), (message) => { status.textContent = message; }, { class: 'secondary' });
}

function previewTable(preview) {
  const time = (iso) => (iso ? new Intl.DateTimeFormat(language(), { timeZone: preview.timezone, hour: '2-digit', minute: '2-digit', hourCycle: 'h23' }).format(new Date(iso)) : '—');
  const day = new Intl.DateTimeFormat(language(), { timeZone: 'UTC', weekday: 'long', day: 'numeric', month: 'long' }).format(new Date(`${preview.date}T12:00:00Z`));
  if (preview.slots.length === 0) return h('p', { class: 'muted' }, t('settings.preview_none'));
  return [
    h('p', {}, t('settings.preview_for', { day, zone: preview.timezone })),
    h('table', { class: 'times', 'data-preview': '' },
      h('thead', {}, h('tr', {}, [t('prayer.prayer'), t('settings.starts'), t('prayer.azaan'), t('prayer.iqamah')].map((c) => h('th', { scope: 'col' }, c)))),
      h('tbody', {}, preview.slots.map((s) => h('tr', { 'data-prayer': s.prayer },
        h('th', { scope: 'row' }, t(`prayer.${s.prayer}`)), h('td', {}, time(s.starts_at)), h('td', {}, time(s.azaan_at)), h('td', {}, time(s.iqamah_at)))))),
  ];
}

function placeSection(state) {
  const m = state.mosque;
  const p = m.prayer_times ?? {};
  const geoStatus = h('p', { role: 'status' });
  const previewBox = h('div', { 'aria-live': 'polite' });
  const lat = h('input', { name: 'latitude', type: 'number', step: 'any', min: -90, max: 90, inputmode: 'decimal', value: m.latitude ?? '' });
  const lon = h('input', { name: 'longitude', type: 'number', step: 'any', min: -180, max: 180, inputmode: 'decimal', value: m.longitude ?? '' });
  const minutes = (name, value) => h('input', { name, type: 'number', step: 1, min: -120, max: 120, inputmode: 'numeric', value: value ?? '' });
  let el;
  const preview = async () => {
    const body = placeOf(new FormData(el));
    if (!body.timezone) delete body.timezone;
    try {
      replace(previewBox, previewTable(await api('POST', `/mosques/${m.id}/schedule/preview`, body)));
    } catch (err) {
      throw new Error(refusal(err));
    }
  };
  el = settingsForm(state, { 'aria-labelledby': 'set-place-h' }, [
    zoneField(t('settings.timezone'), { name: 'timezone', value: m.timezone, required: true }),
    h('fieldset', {}, h('legend', {}, t('settings.location')),
      h('label', {}, h('span', {}, t('settings.latitude')), lat),
      h('label', {}, h('span', {}, t('settings.longitude')), lon),
      locateButton(lat, lon, geoStatus), geoStatus),
    select('method', p.method ?? '', [['', t('settings.method_none')], ...METHODS.map((k) => [k, t(`method.${k}`)])], t('settings.method')),
    select('madhab', p.madhab ?? 'shafi', [['shafi', t('settings.madhab_shafi')], ['hanafi', t('settings.madhab_hanafi')]], t('settings.madhab')),
    select('high_latitude_rule', p.high_latitude_rule ?? '', [['', t('settings.rule_default')], ...HIGH_LATITUDE_RULES.map((k) => [k, t(`settings.rule_${k}`)])], t('settings.high_latitude_rule')),
    h('fieldset', {}, h('legend', {}, t('settings.angles')),
      h('p', { class: 'muted' }, t('settings.angles_hint')),
      h('label', {}, h('span', {}, t('settings.fajr_angle')), h('input', { name: 'fajr_angle', type: 'number', step: 'any', min: 0, max: 30, inputmode: 'decimal', value: p.fajr_angle ?? '' })),
      h('label', {}, h('span', {}, t('settings.isha_angle')), h('input', { name: 'isha_angle', type: 'number', step: 'any', min: 0, max: 30, inputmode: 'decimal', value: p.isha_angle ?? '' }))),
    h('fieldset', {}, h('legend', {}, t('settings.adjustments')),
      h('p', { class: 'muted' }, t('settings.adjustments_hint')),
      PRAYERS.map((k) => h('label', {}, h('span', {}, t(`prayer.${k}`)), minutes(`adjust_${k}`, p.adjustments?.[k])))),
    h('div', { class: 'row' },
      button(t('settings.preview'), preview, (message) => { replace(previewBox, h('p', { class: 'error', role: 'alert' }, message)); }, { class: 'secondary' }),
      h('button', { type: 'submit' }, t('settings.save'))),
    previewBox,
  ], placeOf);
  return h('section', { 'aria-labelledby': 'set-place-h' }, h('h2', { id: 'set-place-h' }, t('settings.place')),
    h('p', { class: 'muted' }, t('settings.place_hint')), el);
}

// ---- azaan, iqamah, Jumu'ah, auto start ----

/** One prayer's rule: a mode and the minutes or the time it needs; the unused input is hidden. */
function ruleFields(kind, prayer, rule, modes) {
  const mode = rule ? ('fixed' in rule ? 'fixed' : 'minutes') : modes[0];
  const minutesKey = kind === 'azaan' ? 'offset_minutes' : 'after_minutes';
  const minutesLabel = h('label', {}, h('span', {}, t(`settings.${kind}_minutes`)),
    h('input', { name: `${kind}_${prayer}_minutes`, type: 'number', step: 1, min: kind === 'azaan' ? -180 : 0, max: 180, inputmode: 'numeric', value: rule?.[minutesKey] ?? '' }));
  const fixedLabel = h('label', {}, h('span', {}, t(`settings.${kind}_fixed`)), h('input', { name: `${kind}_${prayer}_fixed`, type: 'time', value: rule?.fixed ?? '' }));
  const modeSelect = h('select', { name: `${kind}_${prayer}_mode` }, modes.map((k) => h('option', { value: k, selected: k === mode }, t(`settings.${kind}_mode_${k}`))));
  const show = () => {
    minutesLabel.hidden = modeSelect.value !== 'minutes';
    fixedLabel.hidden = modeSelect.value !== 'fixed';
  };
  modeSelect.addEventListener('change', show);
  show();
  return [h('label', {}, h('span', {}, t(`prayer.${kind}`)), modeSelect), minutesLabel, fixedLabel];
}

function ruleOf(data, kind, prayer) {
  const mode = data.get(`${kind}_${prayer}_mode`);
  if (mode === 'fixed') return { fixed: String(data.get(`${kind}_${prayer}_fixed`) ?? '') };
  if (mode !== 'minutes') return undefined;
  // An empty minutes field is 0, as the API's own default; a typo is the API's to refuse (whole minutes).
  return { [kind === 'azaan' ? 'offset_minutes' : 'after_minutes']: numberOrNull(data.get(`${kind}_${prayer}_minutes`)) ?? 0 };
}

function rulesOf(data) {
  const perPrayer = (kind) => Object.fromEntries(PRAYERS.map((p) => [p, ruleOf(data, kind, p)]).filter(([, r]) => r !== undefined));
  const jumuah = [...Array(MAX_JUMUAH).keys()].map((i) => String(data.get(`jumuah_${i}`) ?? '')).filter((v) => v !== '');
  return { azaan: perPrayer('azaan'), iqamah: perPrayer('iqamah'), jumuah, auto_start: data.get('auto_start') === 'on' };
}

function rulesSection(state) {
  const m = state.mosque;
  return h('section', { 'aria-labelledby': 'set-rules-h' }, h('h2', { id: 'set-rules-h' }, t('settings.rules')),
    h('p', { class: 'muted' }, t('settings.rules_hint')),
    settingsForm(state, { 'aria-labelledby': 'set-rules-h' }, [
      PRAYERS.map((p) => h('fieldset', { 'data-rules': p }, h('legend', {}, t(`prayer.${p}`)),
        ruleFields('azaan', p, m.azaan[p], ['start', 'minutes', 'fixed']),
        ruleFields('iqamah', p, m.iqamah[p], ['none', 'minutes', 'fixed']))),
      h('fieldset', {}, h('legend', {}, t('settings.jumuah')),
        h('p', { class: 'muted' }, t('settings.jumuah_hint')),
        [...Array(MAX_JUMUAH).keys()].map((i) => h('label', {}, h('span', {}, t('settings.jumuah_time', { n: i + 1 })), h('input', { name: `jumuah_${i}`, type: 'time', value: m.jumuah[i] ?? '' })))),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'auto_start', checked: m.auto_start }), t('settings.auto_start')),
      h('p', { class: 'muted' }, t('settings.auto_start_hint')),
      h('button', { type: 'submit' }, t('settings.save')),
    ], rulesOf));
}

// ---- uploaded timetables (docs/schedule.md, "Uploading a timetable") ----

/** "Line 14, Fajr: expected "HH:MM"": a CSV problem names its line; JSON rows keep the API's path. */
function problemText(d) {
  const m = /^line (\d+)(?:\.(\w+))?$/.exec(d.path);
  if (!m) return d.path ? `${d.path}: ${d.message}` : d.message;
  const column = m[2] && TIMETABLE_COLUMNS[m[2]] ? t(TIMETABLE_COLUMNS[m[2]]) : m[2];
  return `${column ? t('timetable.line_column', { line: m[1], column }) : t('timetable.line', { line: m[1] })}: ${d.message}`;
}

function timetableSection(state) {
  const id = state.mosque.id;
  const monthName = (n) => new Intl.DateTimeFormat(language(), { month: 'long', timeZone: 'UTC' }).format(new Date(Date.UTC(2026, n - 1, 15)));
  const month = h('select', { name: 'month' }, [...Array(12).keys()].map((i) => h('option', { value: i + 1 }, monthName(i + 1))));
  const file = h('input', { type: 'file', name: 'file', accept: '.csv,text/csv,.json,application/json' });
  const outcome = h('div', { 'data-timetable-outcome': '' });
  const status = h('p', { role: 'status' });
  const say = (...children) => { status.textContent = ''; replace(outcome, children); };
  const upload = form({ 'aria-labelledby': 'set-tt-h', novalidate: true }, [
    h('label', {}, h('span', {}, t('timetable.month')), month),
    h('label', {}, h('span', {}, t('timetable.file')), file),
    h('div', { class: 'row' },
      h('button', { type: 'submit' }, t('timetable.upload')),
      button(t('timetable.delete'), async () => {
        const name = monthName(Number(month.value));
        if (!window.confirm(t('timetable.delete_confirm', { month: name }))) return;
        say();
        try {
          await api('DELETE', `/mosques/${id}/timetable/${month.value}`);
        } catch (err) {
          throw new Error(err.code === 'not_found' ? t('timetable.none_for', { month: name }) : err.message);
        }
        status.textContent = t('timetable.deleted', { month: name });
      }, (message) => say(h('p', { class: 'error', role: 'alert' }, message)), { class: 'danger' })),
    status,
  ], async () => {
    say();
    const chosen = file.files?.[0];
    if (!chosen) throw new Error(t('timetable.choose'));
    const name = monthName(Number(month.value));
    const type = /\.json$/i.test(chosen.name) ? 'application/json' : 'text/csv';
    let done;
    try {
      done = await apiUpload('PUT', `/mosques/${id}/timetable/${month.value}`, chosen, type);
    } catch (err) {
      const details = err.code === 'validation_failed' ? err.details ?? [] : [];
      if (details.length === 0) throw err;
      say(h('p', { class: 'error', role: 'alert' }, t('timetable.refused', { month: name })),
        h('ul', { class: 'problems', 'data-problems': '' }, details.map((d) => h('li', {}, problemText(d)))));
      return;
    }
    file.value = '';
    say(h('p', { role: 'status' }, t('timetable.saved', { month: name, days: done.days })),
      done.warnings.length > 0 && [
        h('p', { class: 'warn' }, t('timetable.warnings')),
        h('ul', { class: 'problems', 'data-warnings': '' }, done.warnings.map((w) => h('li', {}, t('timetable.warning', {
          day: w.day, prayer: t(`prayer.${w.prayer}`), uploaded: w.uploaded, computed: w.computed, minutes: w.difference_minutes,
        })))),
      ]);
  });
  return h('section', { 'aria-labelledby': 'set-tt-h' }, h('h2', { id: 'set-tt-h' }, t('timetable.title')),
    h('p', { class: 'muted' }, t('timetable.about')), upload, outcome);
}

// ---- stream address, join code ----

function streamSection(state) {
  return h('section', { 'aria-labelledby': 'set-stream-h' }, h('h2', { id: 'set-stream-h' }, t('settings.stream')),
    settingsForm(state, { 'aria-labelledby': 'set-stream-h' }, [
      field(t('settings.stream_url'), { name: 'stream_url', type: 'url', inputmode: 'url', value: state.mosque.stream_url ?? '', 'aria-describedby': 'set-stream-hint' }),
      h('p', { id: 'set-stream-hint', class: 'muted' }, t('settings.stream_hint')),
      h('button', { type: 'submit' }, t('settings.save')),
    ], (data) => ({ stream_url: String(data.get('stream_url') ?? '').trim() || null })));
}

function joinSection(state) {
  const box = h('div');
  const status = h('p', { role: 'status' });
  const report = h('p', { class: 'error', role: 'alert' });
  const show = () => {
    const link = joinLink(state.mosque.join_code);
    replace(box,
      h('p', {}, t('admin.join_code'), ' ', h('code', { 'data-join-code': '', tabindex: -1 }, state.mosque.join_code)),
      h('p', {}, t('admin.join_link'), ' ', h('a', { href: link, 'data-join-link': '' }, link)),
      button(t('joincode.rotate'), async () => {
        if (!window.confirm(t('joincode.rotate_confirm'))) return;
        report.textContent = '';
        state.mosque = await api('POST', `/mosques/${state.mosque.id}/join-code`);
        show();
        box.querySelector('[data-join-code]').focus(); // the button it replaced held the focus
        status.textContent = t('joincode.rotated');
      }, (message) => { report.textContent = message; }, { class: 'danger' }));
  };
  show();
  return h('section', { 'aria-labelledby': 'set-join-h' }, h('h2', { id: 'set-join-h' }, t('admin.join')), box, status, report);
}

/** /mosques/{id}/settings: a manager's (or a superadmin's) forms; anyone else is told plainly they cannot. */
export async function settingsView(page, id) {
  const ctx = await mosqueContext(id);
  if (!ctx.canManage) {
    return replace(page, mosqueHeader(ctx.mosque, '/settings', ctx.canManage),
      h('h2', {}, t('settings.title')), h('p', { 'data-not-manager': '' }, t('settings.managers_only')));
  }
  const state = { mosque: ctx.mosque };
  replace(page, mosqueHeader(ctx.mosque, '/settings', ctx.canManage),
    h('p', { class: 'muted' }, t('settings.intro')),
    generalSection(state), placeSection(state), rulesSection(state), timetableSection(state), streamSection(state), joinSection(state));
}
