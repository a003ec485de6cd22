// One device: its facts, the why chain, diagnostic commands, timeline and log lines.
import { api } from '../api.js';
import { button, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { badge, seenText, whyText } from './why.js';

const COMMANDS = ['ping', 'identify', 'play_test', 'diag_bundle'];

export async function deviceView(page, id) {
  const result = h('pre', { role: 'status', 'aria-live': 'polite', class: 'card' }, t('device.no_result'));
  const body = h('div');
  const load = async () => {
    const [d, why, events, logs] = await Promise.all([
      api('GET', `/devices/${id}`), api('GET', `/devices/${id}/why`), api('GET', `/devices/${id}/events?limit=30`), api('GET', `/devices/${id}/logs?limit=30`),
    ]);
    const facts = [['status', badge(d.status)], ['kind', t(`device.kind_${d.kind}`)], ['last_seen', `${when(d.last_seen_at)} (${seenText(d)})`],
      ['rssi', d.rssi ?? '—'], ['fw', d.fw ?? '—'], ['ip', d.ip ?? '—'], ['uptime', d.uptime_s ?? '—']];
    replace(body,
      h('h1', {}, d.name || d.id),
      h('section', { 'aria-labelledby': 'why-h' }, h('h2', { id: 'why-h' }, t('device.why')), h('p', { class: 'why' }, whyText(why, d))),
      h('section', { 'aria-labelledby': 'facts-h' }, h('h2', { id: 'facts-h' }, t('device.facts')),
        h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, t(`device.${k}`)), h('dd', {}, v)]))),
      h('section', { 'aria-labelledby': 'cmd-h' }, h('h2', { id: 'cmd-h' }, t('device.commands')),
        h('div', { class: 'row' }, COMMANDS.map((name) => button(t(`command.${name}`), async () => {
          result.textContent = t('device.sending');
          const answer = await api('POST', `/devices/${id}/commands`, { name, timeout_ms: 10000 });
          result.textContent = `${name}: ${answer.ok ? 'ok' : 'failed'} (${answer.rtt_ms} ms)\n${JSON.stringify(answer.result ?? {}, null, 2)}`;
        }, (message) => { result.textContent = message; }, { class: 'secondary' }))),
        result),
      h('section', { 'aria-labelledby': 'tl-h' }, h('h2', { id: 'tl-h' }, t('device.timeline')),
        h('ul', { class: 'list' }, events.length === 0 ? h('li', { class: 'muted' }, '—') : events.map((e) => h('li', {},
          h('span', { class: 'muted' }, when(e.at)), ' ', h('strong', {}, e.kind), e.from || e.to ? ` ${e.from ?? ''} → ${e.to ?? ''}` : '', e.reason ? ` (${e.reason})` : '')))),
      h('section', { 'aria-labelledby': 'log-h' }, h('h2', { id: 'log-h' }, t('device.logs')),
        (logs.lines ?? []).length === 0 ? h('p', { class: 'muted' }, t('device.no_logs')) : h('pre', {}, logs.lines.map((l) => `${when(l.at)} ${l.level} ${l.msg}\n`))));
  };
  replace(page, body);
  await load();
}
