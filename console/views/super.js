// The superadmin's page: every mosque (with a link to run it), a form to create one, and every user with a search.
import { api } from '../api.js';
import { field, form, h, replace } from '../dom.js';
import { t, when } from '../i18n.js';
import { flash } from '../nav.js';
import { browserZone, zoneField } from './settings.js';

const USERS_PAGE = 200; // GET /users' largest page
const USERS_MAX_PAGES = 50;

/**
 * Every user, page by page (GET /users pages by offset and has no search): a self-hosted mosque has
 * hundreds or a few thousand people, so the search runs in the page over the whole list.
 */
export async function allUsers() {
  const users = [];
  for (let page = 0; page < USERS_MAX_PAGES; page += 1) {
    const rows = await api('GET', `/users?limit=${USERS_PAGE}&offset=${page * USERS_PAGE}`);
    users.push(...rows);
    if (rows.length < USERS_PAGE) break;
  }
  return users;
}

export async function superView(page) {
  const list = h('ul', { class: 'list' });
  const people = h('ul', { class: 'list', 'aria-labelledby': 'us-h' });
  const count = h('p', { class: 'muted', role: 'status', 'aria-live': 'polite' });
  let users = [];
  let search = '';
  const drawUsers = () => {
    // A phone-only account's placeholder email (phone-...@phone.invalid) is not something anyone searches for.
    const shown = users.filter((u) => `${u.email_is_placeholder ? '' : u.email} ${u.phone ?? ''}`.toLowerCase().includes(search));
    count.textContent = t('users.showing', { n: shown.length, total: users.length });
    replace(people, shown.length === 0 ? h('li', { class: 'muted' }, t('users.none')) : shown.map((u) => h('li', { 'data-user': u.id },
      h('div', { class: 'row' }, h('strong', {}, u.email_is_placeholder ? u.phone ?? u.email : u.email), u.role === 'superadmin' && h('span', { class: 'badge' }, t('users.superadmin'))),
      h('p', { class: 'muted' }, [u.phone && !u.email_is_placeholder && u.phone, t(u.has_password ? 'users.has_password' : 'users.code_only'), t('users.since', { when: when(u.created_at) })].filter(Boolean).join(' · ')))));
  };
  const load = async () => {
    const [mosques, all] = await Promise.all([api('GET', '/mosques'), allUsers()]);
    users = all;
    replace(list, mosques.length === 0 ? h('li', { class: 'muted' }, t('super.no_mosques')) : mosques.map((m) => h('li', {}, h('a', { href: `/mosques/${m.id}`, 'data-nav': '' }, m.name))));
    drawUsers();
  };
  replace(page,
    h('h1', {}, t('super.title')),
    h('p', {}, h('a', { href: '/admin/firmware', 'data-nav': '' }, t('firmware.title'))),
    h('section', { 'aria-labelledby': 'ms-h' }, h('h2', { id: 'ms-h' }, t('super.mosques')), list),
    h('section', {}, form({ 'aria-labelledby': 'new-h' }, [
      h('h2', { id: 'new-h' }, t('super.new_mosque')),
      field(t('super.name'), { name: 'name', required: true, maxlength: 120 }),
      // The mosque's times and dates are in its zone: the browser's is the likeliest, and it can be changed here.
      zoneField(t('settings.timezone'), { name: 'timezone', value: browserZone(), required: true }),
      field(t('super.owner_email'), { name: 'owner', type: 'email' }),
      // Players are entitled only to a mosque that has a stream: without one they stay unbound.
      field(t('super.stream_url'), { name: 'stream_url', type: 'url' }),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'auto' }), t('super.auto_approve')),
      h('button', { type: 'submit' }, t('super.create')),
    ], async (data) => {
      // Named by email, the owner is whoever proved that address; until someone does, ownership waits on it
      // (docs/api.md, "Addresses: claims and proof").
      const owner = String(data.get('owner') ?? '').trim();
      const streamUrl = String(data.get('stream_url') ?? '').trim();
      const made = await api('POST', '/mosques', {
        name: String(data.get('name')).trim(), timezone: String(data.get('timezone') ?? '').trim() || 'UTC', auto_approve_members: data.get('auto') === 'on',
        ...(owner && { owner_email: owner }), ...(streamUrl && { stream_url: streamUrl }),
      });
      if (owner && (await api('GET', `/mosques/${made.id}/admins`)).length === 0) flash(t('super.owner_waiting', { email: owner }));
      await load();
    })),
    h('section', { 'aria-labelledby': 'us-h' }, h('h2', { id: 'us-h' }, t('users.title')),
      h('label', {}, h('span', {}, t('users.search')), h('input', { type: 'search', oninput: (e) => { search = e.target.value.trim().toLowerCase(); drawUsers(); } })),
      count, people));
  await load();
}
