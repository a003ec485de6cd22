// The superadmin's page: every mosque (with a link to run it) and a form to create one.
import { api } from '../api.js';
import { field, form, h, replace } from '../dom.js';
import { t } from '../i18n.js';

export async function superView(page) {
  const list = h('ul', { class: 'list' });
  const load = async () => {
    const [mosques, users] = await Promise.all([api('GET', '/mosques'), api('GET', '/users?limit=200')]);
    const emails = new Map(users.map((u) => [u.email, u.id]));
    replace(list, mosques.length === 0 ? h('li', { class: 'muted' }, t('super.no_mosques')) : mosques.map((m) => h('li', {}, h('a', { href: `/mosques/${m.id}`, 'data-nav': '' }, m.name))));
    return emails;
  };
  let emails = new Map();
  replace(page,
    h('h1', {}, t('super.title')),
    h('section', { 'aria-labelledby': 'ms-h' }, h('h2', { id: 'ms-h' }, t('super.mosques')), list),
    h('section', {}, form({ 'aria-labelledby': 'new-h' }, [
      h('h2', { id: 'new-h' }, t('super.new_mosque')),
      field(t('super.name'), { name: 'name', required: true, maxlength: 120 }),
      field(t('super.owner_email'), { name: 'owner', type: 'email' }),
      // Players are entitled only to a mosque that has a stream: without one they stay unbound.
      field(t('super.stream_url'), { name: 'stream_url', type: 'url' }),
      h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'auto' }), t('super.auto_approve')),
      h('button', { type: 'submit' }, t('super.create')),
    ], async (data) => {
      const owner = String(data.get('owner') ?? '').trim().toLowerCase();
      const ownerId = owner ? emails.get(owner) : undefined;
      if (owner && !ownerId) throw new Error(t('super.unknown_owner'));
      const streamUrl = String(data.get('stream_url') ?? '').trim();
      await api('POST', '/mosques', {
        name: String(data.get('name')).trim(), auto_approve_members: data.get('auto') === 'on',
        ...(ownerId && { owner_user_id: ownerId }), ...(streamUrl && { stream_url: streamUrl }),
      });
      emails = await load();
    })));
  emails = await load();
}
