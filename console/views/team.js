// The mosque's team page: its admins and their flags, invitations, and the join code with its
// notice-board sheet. Controls the API would refuse are hidden; when it refuses anyway, its code is
// shown in plain words (api.js, error.<code> in the catalogue).
import { api } from '../api.js';
import { button, field, form, h, replace } from '../dom.js';
import { t } from '../i18n.js';
import { flash } from '../nav.js';
import { joinLink, qrSvg } from '../qr.js';
import { mosqueContext, mosqueHeader, unprovenMark } from './admin.js';

const FLAGS = ['can_trigger', 'can_manage'];

export async function teamView(page, id) {
  const ctx = await mosqueContext(id);
  const admins = h('ul', { class: 'list' });
  const joinBox = h('div');
  const emailList = h('datalist', { id: 'member-emails' });
  let members = [];

  const loadAdmins = async () => {
    const [rows, memberships] = await Promise.all([api('GET', `/mosques/${id}/admins`), api('GET', `/mosques/${id}/memberships`)]);
    members = memberships.filter((m) => m.status !== 'banned');
    replace(emailList, members.map((m) => h('option', { value: m.user_email })));
    replace(admins, rows.map((a) => adminRow(a, ctx, loadAdmins)));
  };
  const showJoin = (mosque) => {
    const link = joinLink(mosque.join_code);
    replace(joinBox,
      h('p', {}, t('admin.join_code'), ' ', h('code', { 'data-join-code': '', tabindex: -1 }, mosque.join_code)),
      h('p', {}, t('admin.join_link'), ' ', h('a', { href: link, 'data-join-link': '' }, link)),
      h('div', { class: 'row' },
        h('a', { href: `/mosques/${id}/print`, 'data-nav': '', class: 'button secondary' }, t('joincode.print')),
        ctx.canManage && button(t('joincode.rotate'), async () => {
          if (!window.confirm(t('joincode.rotate_confirm'))) return;
          showJoin(await api('POST', `/mosques/${id}/join-code`));
          joinBox.querySelector('[data-join-code]').focus(); // the button it replaced held the focus
          flash(t('joincode.rotated'));
        }, flash, { class: 'danger' })));
  };

  replace(page,
    mosqueHeader(ctx.mosque, '/team', ctx.canManage),
    h('section', { 'aria-labelledby': 'adm-h' }, h('h2', { id: 'adm-h', tabindex: -1 }, t('admins.title')),
      !ctx.canManage && h('p', { class: 'muted' }, t('admins.managers_only')),
      admins,
      ctx.canManage && addAdminForm(id, () => members, loadAdmins), emailList),
    h('section', { 'aria-labelledby': 'inv-h' }, h('h2', { id: 'inv-h' }, t('invites.title')), inviteForm(id)),
    h('section', { 'aria-labelledby': 'jc-h' }, h('h2', { id: 'jc-h' }, t('admin.join')), joinBox));
  showJoin(ctx.mosque);
  await loadAdmins();
}

/**
 * One admin. Managers change flags and remove; the owner's row is the superadmin's alone (docs/decisions.md, "Ownership":
 * only a superadmin may remove or demote the owner), so a manager sees it without controls.
 */
function adminRow(a, ctx, reload) {
  const editable = ctx.canManage && (!a.is_owner || ctx.superadmin);
  const flagText = FLAGS.filter((f) => a[f]).map((f) => t(`admins.${f}`)).join(' · ') || t('admins.no_flags');
  return h('li', { 'data-admin': a.email },
    h('div', { class: 'row' }, h('strong', {}, a.email), unprovenMark(a.email_proven, 'email'), a.is_owner && h('span', { class: 'badge owner' }, t('admins.owner'))),
    editable
      ? h('fieldset', {}, h('legend', {}, t('admins.rights_of', { email: a.email })),
        FLAGS.map((f) => h('label', { class: 'check' }, h('input', { type: 'checkbox', checked: a[f], onchange: async (e) => {
          const box = e.target;
          try {
            await api('PATCH', `/mosques/${ctx.mosque.id}/admins/${a.user_id}`, { [f]: box.checked });
            flash(t('admins.saved', { email: a.email }));
          } catch (err) {
            box.checked = !box.checked;
            flash(err.message);
          }
        } }), t(`admins.${f}`))),
        button(t('admins.remove'), async () => {
          if (!window.confirm(t('admins.remove_confirm', { email: a.email }))) return;
          await api('DELETE', `/mosques/${ctx.mosque.id}/admins/${a.user_id}`);
          flash(t('admins.removed', { email: a.email }));
          await reload();
          document.getElementById('adm-h')?.focus(); // the row that held the focus is gone
        }, flash, { class: 'danger', 'aria-label': `${t('admins.remove')}: ${a.email}` }))
      : h('p', { class: 'muted' }, flagText));
}

/**
 * The API names a new admin by user_id. A manager knows people by email, and sees the emails of the
 * mosque's members (GET /memberships): the form takes an email, offers the members' emails, and resolves
 * it among them. Someone who is not a member is invited first (below).
 */
function addAdminForm(id, members, reload) {
  return form({ 'aria-labelledby': 'add-adm-h' }, [
    h('h3', { id: 'add-adm-h' }, t('admins.add')),
    field(t('admins.email'), { name: 'email', type: 'email', required: true, list: 'member-emails', autocomplete: 'off' }),
    FLAGS.map((f) => h('label', { class: 'check' }, h('input', { type: 'checkbox', name: f }), t(`admins.${f}`))),
    h('button', { type: 'submit' }, t('admins.add_button')),
  ], async (data, _submitter) => {
    const email = String(data.get('email')).trim();
    // By address (docs/api.md, "Addresses: claims and proof"): one answer whether or not someone proved it; the
    // account that did gets the row just after the answer, so the list is read again a moment later too.
    await api('POST', `/mosques/${id}/admins`, { email, can_trigger: data.get('can_trigger') === 'on', can_manage: data.get('can_manage') === 'on' });
    flash(t('admins.accepted', { email }));
    await reload();
    setTimeout(() => void reload(), 1000);
  });
}

/** POST /invites: by email or WhatsApp number; the outcome (the membership's status) is read out. */
function inviteForm(id) {
  const outcome = h('p', { role: 'status', 'data-invite-outcome': '' });
  const el = form({ 'aria-labelledby': 'inv-h' }, [
    h('label', {}, h('span', {}, t('invites.channel')), h('select', { name: 'channel' },
      h('option', { value: 'email' }, t('invites.channel_email')), h('option', { value: 'whatsapp' }, t('invites.channel_whatsapp')))),
    field(t('invites.contact'), { name: 'contact', required: true, autocomplete: 'off', 'aria-describedby': 'inv-hint' }),
    h('p', { id: 'inv-hint', class: 'muted' }, t('invites.hint')),
    h('label', { class: 'check' }, h('input', { type: 'checkbox', name: 'auto' }), t('invites.auto_approve')),
    h('button', { type: 'submit' }, t('invites.send')),
  ], async (data) => {
    outcome.textContent = '';
    const contact = String(data.get('contact')).trim();
    const channel = data.get('channel') === 'whatsapp' ? 'whatsapp' : 'email';
    const body = { mosque_id: id, auto_approve: data.get('auto') === 'on', [channel]: channel === 'whatsapp' ? contact.replace(/[^+\d]/g, '') : contact };
    try {
      const { membership } = await api('POST', '/invites', body);
      // null: nobody has confirmed the address yet, and the membership waits until someone does.
      outcome.textContent = t(membership ? `invites.sent_${membership.status}` : 'invites.sent_waiting', { contact });
      el.reset();
    } catch (err) {
      // The catalogue's membership_banned speaks to the banned person; here the admin is told what it means.
      if (err.code === 'membership_banned') throw new Error(t('invites.banned', { contact }));
      throw err;
    }
  });
  return [el, outcome];
}

/** The notice-board sheet: the mosque's name, the QR code, the link in text and one line of instructions. */
export async function printView(page, id) {
  const mosque = await api('GET', `/mosques/${id}`);
  const link = joinLink(mosque.join_code);
  replace(page,
    h('div', { class: 'sheet' },
      h('h1', {}, mosque.name),
      qrSvg(link, t('joincode.qr_label', { link })),
      h('p', { class: 'sheet-link' }, link),
      h('p', { class: 'sheet-how' }, t('joincode.instructions'))),
    h('div', { class: 'row no-print' },
      h('button', { type: 'button', onclick: () => window.print() }, t('joincode.print_now')),
      h('a', { href: `/mosques/${id}/team`, 'data-nav': '' }, t('joincode.back'))));
}
