// Firmware updates for the superadmin (docs/api.md, "Firmware updates"): the signed images, a form for a staged
// rollout, each rollout's groups as bars with their numbers in words, and a device's firmware history.
import { api, apiUpload } from '../../api.js';
import { button, field, form, h, replace } from '../../dom.js';
import { t, when } from '../../i18n.js';

const KINDS = ['stream_player', 'transmitter'];
/** Each group's devices by where they are, in the order the bar draws them (docs/api.md, GET /firmware/rollouts/{id}). */
const PARTS = ['succeeded', 'failed', 'updating', 'offered', 'waiting_for_window', 'waiting'];
const UNFINISHED = new Set(['running', 'paused', 'paused_by_errors']);
/** The runner moves a rollout on its own ticks (seconds apart): the page asks again this often while one is unfinished. */
const POLL_MS = 3_000;
/** The defaults the API applies (docs/api.md, "Rollouts"), shown in the form so nobody has to look them up. */
const DEFAULTS = { groups: '2, 50%, 100%', success: 100, error: 20, concurrent: 10, timeoutMin: 30 };

export async function firmwareView(page) {
  const images = h('ul', { class: 'list', 'aria-labelledby': 'fw-img-h' });
  const rollouts = h('ul', { class: 'list', 'aria-labelledby': 'fw-ro-h' });
  const report = h('p', { class: 'error', role: 'alert' });
  const newRollout = h('div');
  let shown = '';
  const loadRollouts = async () => {
    const rows = await api('GET', '/firmware/rollouts');
    const drawn = JSON.stringify(rows);
    if (drawn === shown) return; // nothing moved: the buttons keep their focus
    shown = drawn;
    replace(rollouts, rows.length === 0 ? h('li', { class: 'muted' }, t('firmware.no_rollouts')) : rows.map((r) => rolloutItem(r, act)));
  };
  const act = async (id, verb) => {
    report.textContent = '';
    if (verb === 'cancel' && !window.confirm(t('firmware.cancel_confirm'))) return;
    await api('POST', `/firmware/rollouts/${id}/${verb}`).catch((err) => { report.textContent = err.message; });
    await loadRollouts();
  };
  const load = async () => {
    const [list, mosques] = await Promise.all([api('GET', '/firmware/images'), api('GET', '/mosques')]);
    replace(images, list.length === 0 ? h('li', { class: 'muted' }, t('firmware.no_images')) : list.map(imageItem));
    replace(newRollout, list.length === 0 ? h('p', { class: 'muted' }, t('firmware.upload_first')) : rolloutForm(list, mosques, loadRollouts));
    await loadRollouts();
  };
  const heading = h('h1', {}, t('firmware.title'));
  try {
    await api('GET', '/firmware/images');
  } catch (err) {
    // Off until the operator sets FIRMWARE_PUBLIC_KEY: every route answers 409 saying so.
    if (err.status !== 409) throw err;
    return void replace(page, heading, h('p', { class: 'warn', 'data-firmware-off': '' }, t('firmware.off')));
  }
  // What is moving first (on a phone the forms below are long), then a new rollout, then the images it sends.
  replace(page, heading, h('p', { class: 'muted' }, t('firmware.intro')),
    h('section', { 'aria-labelledby': 'fw-ro-h' }, h('h2', { id: 'fw-ro-h' }, t('firmware.rollouts')), report, rollouts),
    h('section', { 'aria-labelledby': 'fw-new-h' }, h('h2', { id: 'fw-new-h' }, t('firmware.new_rollout')), newRollout),
    h('section', { 'aria-labelledby': 'fw-img-h' }, h('h2', { id: 'fw-img-h' }, t('firmware.images')), images, uploadForm(load)));
  await load();
  const timer = setInterval(() => void loadRollouts().catch(() => {}), POLL_MS);
  return () => clearInterval(timer);
}

const imageName = (i) => `${t(`device.kind_${i.kind}`)} ${i.hw_rev} · ${i.version}`;
const sizeText = (bytes) => new Intl.NumberFormat(document.documentElement.lang, { style: 'unit', unit: bytes >= 1_048_576 ? 'megabyte' : 'kilobyte', maximumFractionDigits: 1 })
  .format(bytes >= 1_048_576 ? bytes / 1_048_576 : bytes / 1024);

function imageItem(i) {
  return h('li', { 'data-image': i.id },
    h('strong', {}, imageName(i)),
    h('p', { class: 'muted' }, [sizeText(i.size), t('firmware.sha', { sha: i.sha256.slice(0, 12) }), t('firmware.added', { when: when(i.created_at) })].join(' · ')),
    i.notes && h('p', {}, i.notes));
}

/** The image as `minaret firmware sign` left it: the file, and the signature it printed (docs/api.md, "Images"). */
function uploadForm(onDone) {
  return form({ 'aria-labelledby': 'fw-up-h' }, [
    h('h3', { id: 'fw-up-h' }, t('firmware.upload')),
    h('p', { class: 'muted' }, t('firmware.upload_hint')),
    h('label', {}, h('span', {}, t('firmware.kind')), h('select', { name: 'kind' }, KINDS.map((k) => h('option', { value: k }, t(`device.kind_${k}`))))),
    field(t('firmware.hw_rev'), { name: 'hw_rev', required: true, maxlength: 64, pattern: '[A-Za-z0-9._\\-]{1,64}', dir: 'ltr', autocomplete: 'off' }),
    field(t('firmware.version'), { name: 'version', required: true, maxlength: 64, placeholder: '1.5.0', dir: 'ltr', autocomplete: 'off' }),
    field(t('firmware.file'), { name: 'file', type: 'file', required: true }),
    field(t('firmware.signature'), { name: 'signature', required: true, dir: 'ltr', autocomplete: 'off', spellcheck: 'false' }),
    field(t('firmware.notes'), { name: 'notes', maxlength: 2000 }),
    h('button', { type: 'submit' }, t('firmware.upload_button')),
  ], async (data) => {
    const path = ['kind', 'hw_rev', 'version'].map((k) => encodeURIComponent(String(data.get(k)).trim())).join('/');
    const notes = String(data.get('notes') ?? '').trim();
    await apiUpload('PUT', `/firmware/images/${path}`, data.get('file'), 'application/octet-stream', {
      'X-Firmware-Signature': String(data.get('signature')).trim(), ...(notes && { 'X-Firmware-Notes': encodeURIComponent(notes) }),
    });
    await onDone();
  });
}

/** "2, 50%, 100%" -> [{devices: 2}, {percent: 50}, {percent: 100}]; null when a part is neither. */
export function parseGroups(text) {
  const parts = text.split(/[,،]/).map((p) => p.trim()).filter(Boolean);
  const groups = parts.map((p) => {
    const m = /^(\d+(?:\.\d+)?)\s*(%?)$/.exec(p.replace(/[٠-٩]/g, (d) => String(d.charCodeAt(0) - 0x660)).replace('٪', '%'));
    if (!m) return null;
    return m[2] ? { percent: Number(m[1]) } : Number.isInteger(Number(m[1])) ? { devices: Number(m[1]) } : null;
  });
  return groups.length > 0 && groups.every(Boolean) ? groups : null;
}

const numberField = (label, name, value, min, max) => field(label, { name, type: 'number', inputmode: 'numeric', min, max, step: 1, value, required: true });

function rolloutForm(images, mosques, onDone) {
  return form({ 'aria-labelledby': 'fw-new-h', 'data-new-rollout': '' }, [
    // Grouped by kind, each option only its version and revision: a select cannot wrap, and a phone is narrow.
    h('label', {}, h('span', {}, t('firmware.image')), h('select', { name: 'image_id' }, KINDS.filter((k) => images.some((i) => i.kind === k)).map((k) =>
      h('optgroup', { label: t(`device.kind_${k}`) }, images.filter((i) => i.kind === k).map((i) => h('option', { value: i.id }, `${i.version} (${i.hw_rev})`)))))),
    h('fieldset', {}, h('legend', {}, t('firmware.mosques')), h('p', { class: 'muted' }, t('firmware.mosques_hint')),
      mosques.map((m) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'mosque_ids', value: m.id }), h('span', { class: 'wrap' }, m.name)))),
    field(t('firmware.groups'), { name: 'groups', value: DEFAULTS.groups, required: true, dir: 'ltr', autocomplete: 'off' }),
    h('p', { class: 'muted' }, t('firmware.groups_hint')),
    field(t('firmware.fw_range'), { name: 'fw_range', dir: 'ltr', autocomplete: 'off', placeholder: '>=1.2.0 <1.5.0' }),
    numberField(t('firmware.success_pct'), 'success', DEFAULTS.success, 0, 100),
    numberField(t('firmware.error_pct'), 'error', DEFAULTS.error, 1, 100),
    numberField(t('firmware.max_concurrent'), 'concurrent', DEFAULTS.concurrent, 1, 10_000),
    numberField(t('firmware.timeout_min'), 'timeout', DEFAULTS.timeoutMin, 1, 7 * 1440),
    h('button', { type: 'submit' }, t('firmware.start')),
  ], async (data) => {
    const groups = parseGroups(String(data.get('groups')));
    if (!groups) throw new Error(t('firmware.groups_invalid'));
    const mosqueIds = data.getAll('mosque_ids').map(String);
    const range = String(data.get('fw_range') ?? '').trim();
    await api('POST', '/firmware/rollouts', {
      image_id: String(data.get('image_id')), groups, ...(mosqueIds.length > 0 && { mosque_ids: mosqueIds }), ...(range && { fw_range: range }),
      success_threshold_pct: Number(data.get('success')), error_threshold_pct: Number(data.get('error')),
      max_concurrent: Number(data.get('concurrent')), timeout_s: Number(data.get('timeout')) * 60,
    });
    await onDone();
  });
}

function rolloutItem(r, act) {
  const unfinished = UNFINISHED.has(r.status);
  const move = (verb, cls) => button(t(`firmware.${verb}`), () => act(r.id, verb), () => {}, { class: cls, 'data-verb': verb });
  return h('li', { 'data-rollout': r.id, 'data-status': r.status },
    h('div', { class: 'row' }, h('strong', {}, imageName(r.image)), h('span', { class: `badge ${r.status}` }, t(`firmware.status_${r.status}`))),
    h('p', { class: 'muted' }, t('firmware.started', { when: when(r.created_at) })),
    r.status === 'paused_by_errors' && h('p', { class: 'warn' }, t('firmware.paused_by_errors_hint')),
    h('ol', { class: 'fw-groups' }, r.groups.map(groupItem)),
    unfinished && h('div', { class: 'row' },
      r.status === 'running' ? move('pause', 'secondary') : move('resume', 'secondary'), move('cancel', 'danger')));
}

/** One group: a bar of its devices by where they are (for the eye) and the same numbers in words (for everyone). */
function groupItem(g, index) {
  const bar = h('div', { class: 'fw-bar', 'aria-hidden': 'true' }, PARTS.filter((p) => g[p] > 0).map((p) => {
    const part = h('span', { class: `fw-${p}` });
    part.style.inlineSize = `${(100 * g[p]) / Math.max(1, g.size)}%`; // through the CSSOM: the page's CSP refuses style attributes
    return part;
  }));
  const words = PARTS.filter((p) => g[p] > 0).map((p) => h('span', { class: 'fw-key', 'data-part': p, 'data-count': g[p] }, h('i', { class: `fw-${p}` }), t(`firmware.part_${p}`, { count: g[p] })));
  return h('li', { 'data-group': index },
    h('strong', {}, t(index === 0 ? 'firmware.canary' : 'firmware.group', { n: index + 1 }), ' · ', t('firmware.devices', { count: g.size })),
    bar, h('p', { class: 'fw-words' }, words.length > 0 ? words : t('firmware.empty_group')));
}

/** The device page's part: every rollout that offered it an image, and what came of it (GET /devices/{id}/firmware). */
export async function historySection(deviceId) {
  const rows = await api('GET', `/devices/${deviceId}/firmware`).catch(() => null);
  if (rows === null) return null;
  return h('section', { 'aria-labelledby': 'fwh-h', 'data-firmware-history': '' }, h('h2', { id: 'fwh-h' }, t('firmware.history')),
    h('ul', { class: 'list' }, rows.length === 0 ? h('li', { class: 'muted' }, t('firmware.history_none')) : rows.map((r) => h('li', { 'data-outcome': r.state },
      h('strong', {}, t('firmware.history_item', { from: r.from_fw ?? '—', to: r.target_fw })), ' ', t(`firmware.outcome_${r.state}`),
      r.error && ` (${r.error})`,
      h('p', { class: 'muted' }, when(r.finished_at ?? r.offered_at ?? r.created_at))))));
}
