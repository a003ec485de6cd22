// The signed-in person's own account: whether their email is proven (and proving it), their password, and
// signing out of every device. docs/api.md, "Addresses: claims and proof", "Changing the password", "Signing out".
import { api, sha256Hex, signIn, signOut } from '../api.js';
import { button, field, form, h, replace } from '../dom.js';
import { t } from '../i18n.js';
import { flash } from '../nav.js';

export async function accountView(page) {
  const me = await api('GET', '/me');
  const user = me.user;
  const confirm = h('div');
  const showConfirm = () => replace(confirm, confirmEmail(user, () => void accountView(page)));
  if (!user.email_is_placeholder) showConfirm();

  const passwordForm = form({ 'aria-labelledby': 'pwd-h' }, [
    h('h2', { id: 'pwd-h' }, t('account.password_title')),
    user.has_password && field(t('account.current_password'), { name: 'current', type: 'password', autocomplete: 'current-password', required: true }),
    field(t('account.new_password'), { name: 'next', type: 'password', autocomplete: 'new-password', minlength: 8, required: true }),
    h('button', { type: 'submit' }, t('account.change_password')),
  ], async (data) => {
    const body = {
      ...(user.has_password && { current_password_hash: await sha256Hex(String(data.get('current'))) }),
      new_password_hash: await sha256Hex(String(data.get('next'))),
    };
    // Every older token stops working: the answer carries the one this page goes on with.
    await signIn(await api('POST', '/me/password', body));
    flash(t('account.password_changed'));
  });

  replace(page,
    h('h1', {}, t('account.title')),
    h('section', { 'aria-labelledby': 'addr-h' },
      h('h2', { id: 'addr-h' }, t('account.addresses')),
      h('dl', { class: 'facts' },
        !user.email_is_placeholder && [h('dt', {}, t('auth.email')), h('dd', { class: 'wrap' }, user.email, ' ', addressBadge(user.email_proven))],
        user.phone && [h('dt', {}, t('account.phone')), h('dd', {}, user.phone, ' ', addressBadge(user.phone_proven))]),
      confirm),
    h('section', {}, passwordForm),
    h('section', { 'aria-labelledby': 'out-h' },
      h('h2', { id: 'out-h' }, t('account.sessions_title')),
      h('p', { class: 'muted' }, t('account.sign_out_all_help')),
      button(t('account.sign_out_all'), async () => {
        if (!window.confirm(t('account.sign_out_all_confirm'))) return;
        await api('POST', '/auth/logout-all');
        signOut();
      }, flash, { class: 'danger' })));
}

function addressBadge(proven) {
  return h('span', { class: proven ? 'badge approved' : 'badge pending' }, t(proven ? 'account.proven' : 'account.unproven'));
}

/** Whether the account may hold anything: one of its addresses is confirmed (docs/api.md, "Addresses: claims and proof"). */
export function holds(user) {
  return user.role === 'superadmin' || user.email_proven || user.phone_proven;
}

/**
 * "Confirm your email first": one button sends the code, then the code is typed here. An account with no
 * confirmed address holds nothing, so this comes before joining, players and notifications. A phone-only account
 * confirms its phone.
 */
export function confirmEmail(user, done) {
  const byPhone = user.email_is_placeholder;
  if (byPhone ? user.phone_proven || !user.phone : user.email_proven) return null;
  const address = byPhone ? user.phone : user.email;
  const codeForm = form({ 'aria-labelledby': 'code-h', hidden: true }, [
    h('h3', { id: 'code-h' }, t('account.enter_code')),
    field(t('account.code'), { name: 'code', inputmode: 'numeric', autocomplete: 'one-time-code', pattern: '[0-9]{6}', maxlength: 6, required: true }),
    h('button', { type: 'submit' }, t('account.confirm')),
  ], async (data) => {
    await api('POST', '/me/addresses/verify', { code: String(data.get('code')).trim() });
    done(); // first: going back to a page clears the flash line
    flash(t('account.confirmed'));
  });
  return h('div', { class: 'card', 'data-unproven': 'email' },
    h('p', {}, h('strong', {}, t(holds(user) ? 'account.confirm_email_title' : 'account.confirm_first_title'))),
    h('p', { class: 'muted' }, t(holds(user) ? 'account.confirm_email_help' : 'account.confirm_first_help', { email: address })),
    button(t('account.send_code'), async () => {
      await api('POST', '/me/addresses/confirm', { channel: byPhone ? 'sms' : 'email' });
      codeForm.hidden = false;
      flash(t('account.code_sent', { email: address }));
      codeForm.querySelector('input')?.focus();
    }, flash),
    codeForm);
}
