// A member's home: memberships with their notification toggles, joining, and their stream players.
import { api, currentUser } from '../api.js';
import { field, form, h, replace } from '../dom.js';
import { t } from '../i18n.js';
import { flash, navigate, rememberTarget } from '../nav.js';
import { pushSection } from './push.js';
import { confirmEmail, holds } from './account.js';
import { prayerSection } from './schedule.js';
import { badge, seenText, whyText } from './why.js';
import { pairForm } from './device.js';

const TOGGLES = ['notify_azaan', 'notify_jummah', 'notify_waaz', 'notify_announcement'];
const PLAYER_REFRESH_S = 10;

export async function homeView(page) {
  const [me, mosques] = await Promise.all([api('GET', '/me'), api('GET', '/mosques')]);
  const names = new Map(mosques.map((m) => [m.id, m.name]));
  const approved = new Set(me.memberships.filter((m) => m.status === 'approved').map((m) => m.mosque_id));
  const prayers = prayerSection(mosques.filter((m) => approved.has(m.id)));
  const players = h('ul', { class: 'list', 'aria-live': 'polite' });
  const credentials = h('div');

  const membership = (m) => h('li', {},
    h('div', { class: 'row' }, h('strong', {}, names.get(m.mosque_id) ?? m.mosque_id), badge(m.status)),
    h('p', { class: 'muted' }, t(`membership.${m.status}`)),
    m.status === 'approved' && listenButton(m.mosque_id),
    h('fieldset', {}, h('legend', {}, t('membership.notifications')),
      TOGGLES.map((key) => h('label', { class: 'check' },
        h('input', { type: 'checkbox', checked: m[key], onchange: async (e) => {
          const box = e.target;
          try {
            await api('PATCH', `/memberships/${m.id}`, { [key]: box.checked });
            flash(t('membership.saved'));
          } catch (err) {
            box.checked = !box.checked;
            flash(err.message);
          }
        } }),
        t(`membership.${key}`)))));

  const approvedMosques = me.memberships.filter((m) => m.status !== 'banned');
  const registerForm = form({ 'aria-labelledby': 'reg-h' }, [
    h('h3', { id: 'reg-h' }, t('player.register')),
    field(t('player.name'), { name: 'name', maxlength: 60, required: true }),
    h('label', {}, h('span', {}, t('player.mosque')), h('select', { name: 'mosque_id' },
      h('option', { value: '' }, t('player.no_mosque')),
      approvedMosques.map((m) => h('option', { value: m.mosque_id, selected: approvedMosques.length === 1 }, names.get(m.mosque_id) ?? m.mosque_id)))),
    h('button', { type: 'submit' }, t('player.register_button')),
  ], async (data) => {
    const body = { kind: 'stream_player', name: String(data.get('name')).trim(), ...(data.get('mosque_id') && { mosque_id: data.get('mosque_id') }) };
    const made = await api('POST', '/devices', body);
    showCredentials(credentials, made);
    await refreshPlayers();
  });

  // The usual way: type the code the player shows (docs/api.md, "Pairing a device"); copying credentials by hand stays, folded away.
  const placed = me.memberships.filter((m) => m.status === 'pending' || m.status === 'approved');
  const pairing = placed.length > 0
    ? pairForm({ heading: t('pair.add_player'), mosques: placed.map((m) => [m.mosque_id, names.get(m.mosque_id) ?? m.mosque_id]), onPaired: () => refreshPlayers() })
    : h('p', { class: 'muted' }, t('pair.no_mosque'));
  const advanced = h('details', {}, h('summary', {}, t('pair.advanced')), credentials, registerForm);

  const refreshPlayers = async () => {
    const mine = (await api('GET', '/devices')).filter((d) => d.owner_user_id === currentUser()?.id);
    const whys = await Promise.all(mine.map((d) => api('GET', `/devices/${d.id}/why`).catch(() => null)));
    replace(players, mine.length === 0 ? h('li', { class: 'muted' }, t('player.none')) : mine.map((d, i) => h('li', { 'data-device': d.id },
      h('div', { class: 'row' }, h('a', { href: `/devices/${d.id}`, 'data-nav': '' }, d.name || d.id), badge(d.status)),
      h('p', { class: 'why' }, whys[i] ? whyText(whys[i], d) : ''),
      h('p', { class: 'muted' }, seenText(d)))));
  };

  replace(page,
    h('h1', {}, t('home.title')),
    // An account with no confirmed address holds nothing (docs/api.md, "Addresses: claims and proof"): it is
    // led to confirm one first, and offered nothing it could not keep.
    confirmEmail(me.user, () => navigate('/', true)),
    prayers.section,
    me.admin_of.length > 0 && h('section', { 'aria-labelledby': 'run-h' }, h('h2', { id: 'run-h' }, t('home.you_run')),
      h('ul', { class: 'list' }, me.admin_of.map((a) => h('li', {}, h('a', { href: `/mosques/${a.mosque_id}`, 'data-nav': '' }, names.get(a.mosque_id) ?? a.mosque_id))))),
    h('section', { 'aria-labelledby': 'mem-h' }, h('h2', { id: 'mem-h' }, t('home.memberships')),
      me.memberships.length === 0 ? h('p', { class: 'muted' }, t('home.no_memberships')) : h('ul', { class: 'list' }, me.memberships.map(membership)),
      holds(me.user) && form({ 'aria-labelledby': 'join-h' }, [
        h('h3', { id: 'join-h' }, t('join.by_code')),
        field(t('join.code'), { name: 'code', autocomplete: 'off', required: true }),
        h('button', { type: 'submit', class: 'secondary' }, t('join.button')),
      ], async (data) => {
        await joinByCode(String(data.get('code')).trim());
      })),
    holds(me.user) && pushSection(),
    holds(me.user) && h('section', { 'aria-labelledby': 'pl-h' }, h('h2', { id: 'pl-h' }, t('home.players')), players, pairing, advanced));
  await Promise.all([refreshPlayers(), prayers.load()]);
  // One timer for the page: the countdown ticks every second, and members get no event stream (it is for
  // admins), so the player list is read again every PLAYER_REFRESH_S ticks. Cleared when the page is left.
  let ticks = 0;
  const timer = setInterval(() => {
    prayers.tick(Date.now());
    if (++ticks % PLAYER_REFRESH_S === 0) void refreshPlayers().catch(() => {});
  }, 1000);
  return () => clearInterval(timer);
}

/**
 * Listen in the browser (docs/api.md, "Listening in the console"): a 10-minute address from the API that the audio
 * server admits for this member. Without an audio server (409) the button says so and goes.
 */
function listenButton(mosqueId) {
  const slot = h('div', { class: 'listen' });
  const start = h('button', { type: 'button', class: 'secondary' }, t('listen.button'));
  start.addEventListener('click', async () => {
    start.disabled = true;
    try {
      const { url } = await api('POST', `/mosques/${mosqueId}/listen`);
      replace(slot, h('audio', { controls: true, autoplay: true, src: url, 'aria-label': t('listen.player') }));
    } catch (err) {
      replace(slot, h('p', { class: 'muted' }, err.status === 409 ? t('listen.off') : err.message));
    }
  });
  replace(slot, start);
  return slot;
}

function showCredentials(target, made) {
  const c = made.credentials;
  const facts = [['client_id', c.client_id], ['username', c.username], ['password', c.password], ['mqtt_url', c.mqtt_url], ['ws_url', c.ws_url]];
  replace(target, h('div', { class: 'card', role: 'alert' },
    h('h3', {}, t('player.credentials')),
    h('p', {}, t('player.credentials_once')),
    h('dl', { class: 'facts' }, facts.map(([k, v]) => [h('dt', {}, k), h('dd', {}, h('code', { 'data-credential': k }, v ?? ''))]))));
}

async function joinByCode(code) {
  const m = await api('POST', '/join', { code });
  flash(t(`membership.${m.status}`));
  navigate('/', true);
}

/**
 * /join/<code>: the link an admin shares. It names the mosque, signed in or out (GET /join/{code}, docs/api.md
 * "Join links"); a signed-out visitor signs in or up first and lands back here.
 */
export async function joinView(page, code) {
  let name;
  try {
    name = (await api('GET', `/join/${encodeURIComponent(code)}`)).mosque_name;
  } catch (err) {
    if (err.code !== 'not_found') throw err;
    return replace(page, h('h1', {}, t('join.title')), h('p', { class: 'error', role: 'alert' }, t('join.unknown')));
  }
  if (!currentUser()) {
    rememberTarget(`/join/${code}`);
    return replace(page,
      h('h1', {}, t('join.named_title', { name })),
      h('p', {}, t('join.signed_out', { name })),
      h('p', { class: 'row' }, h('a', { href: '/signin', 'data-nav': '', class: 'button' }, t('nav.sign_in')),
        h('a', { href: '/signup', 'data-nav': '', class: 'button secondary' }, t('nav.sign_up'))));
  }
  const me = await api('GET', '/me');
  replace(page,
    h('h1', {}, t('join.named_title', { name })),
    // Joining waits on a confirmed address: the code is confirmed here, then the page comes back to the join.
    confirmEmail(me.user, () => void joinView(page, code)),
    h('section', {}, h('p', {}, t('join.named_confirm', { name })),
      form({}, [h('button', { type: 'submit' }, t('join.button'))], () => joinByCode(code))));
}
