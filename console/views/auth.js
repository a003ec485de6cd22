// Sign in (password or 6-digit code), sign up, and the superadmin's two steps. Identifiers and passwords
// are hashed here with WebCrypto exactly as the API requires (docs/api.md, "Signing in"): the server never sees either.
import { api, currentUser, hmacHex, identifierHash, sha256Hex, signIn } from '../api.js';
import { field, form, h, replace } from '../dom.js';
import { t } from '../i18n.js';
import { signedIn as goOn } from '../nav.js';

const link = (href, key) => h('a', { href, 'data-nav': '' }, t(key));

/**
 * docs/console.md, "Where a sign-in lands": a superadmin on All mosques, the admin of one mosque on that mosque, of
 * several on Home (which lists them to choose from), a member on Home. A page that asked for the sign-in wins.
 */
async function landing() {
  if (currentUser()?.role === 'superadmin') return '/admin';
  const me = await api('GET', '/me');
  return me.admin_of.length === 1 ? `/mosques/${me.admin_of[0].mosque_id}` : '/';
}
const signedIn = () => goOn(landing);

export function signInView(page) {
  const passwordForm = form({ 'aria-labelledby': 'pw-h' }, [
    h('h2', { id: 'pw-h' }, t('auth.with_password')),
    field(t('auth.email'), { name: 'email', type: 'email', autocomplete: 'username', required: true }),
    field(t('auth.password'), { name: 'password', type: 'password', autocomplete: 'current-password', required: true }),
    h('button', { type: 'submit' }, t('auth.sign_in')),
  ], async (data) => {
    const body = { identifier_hash: await identifierHash(data.get('email')), password_hash: await sha256Hex(data.get('password')) };
    await signIn(await api('POST', '/auth/login', body));
    await signedIn();
  });

  const codeStep = h('div');
  const codeForm = form({ 'aria-labelledby': 'code-h' }, [
    h('h2', { id: 'code-h' }, t('auth.with_code')),
    field(t('auth.email'), { name: 'email', type: 'email', autocomplete: 'username', required: true }),
    h('button', { type: 'submit', class: 'secondary' }, t('auth.send_code')),
  ], async (data) => {
    const identifier_hash = await identifierHash(data.get('email'));
    await api('POST', '/auth/login-code', { identifier_hash, channel: 'email' });
    replace(codeStep, form({}, [
      h('p', { role: 'status' }, t('auth.code_sent')),
      field(t('auth.code'), { name: 'code', inputmode: 'numeric', autocomplete: 'one-time-code', pattern: '[0-9]{6}', maxlength: 6, required: true }),
      h('button', { type: 'submit' }, t('auth.sign_in')),
    ], async (d) => {
      await signIn(await api('POST', '/auth/login-code/verify', { identifier_hash, code: String(d.get('code')).trim() }));
      await signedIn();
    }));
    codeStep.querySelector('input')?.focus();
  });

  replace(page,
    h('h1', {}, t('auth.sign_in_title')),
    h('section', {}, passwordForm),
    h('section', {}, codeForm, codeStep),
    h('p', {}, t('auth.no_account'), ' ', link('/signup', 'nav.sign_up')),
    h('p', { class: 'muted' }, link('/superadmin', 'auth.superadmin_link')));
}

export function signUpView(page) {
  replace(page,
    h('h1', {}, t('auth.sign_up_title')),
    h('section', {}, form({}, [
      field(t('auth.email'), { name: 'email', type: 'email', autocomplete: 'username', required: true }),
      field(t('auth.password'), { name: 'password', type: 'password', autocomplete: 'new-password', minlength: 8, required: true }),
      h('button', { type: 'submit' }, t('auth.create_account')),
    ], async (data) => {
      const body = { email: String(data.get('email')).trim().toLowerCase(), password_hash: await sha256Hex(data.get('password')) };
      await signIn(await api('POST', '/auth/signup', body));
      await signedIn();
    })),
    h('p', {}, t('auth.have_account'), ' ', link('/signin', 'nav.sign_in')));
}

/** Step 1 sends the hashes; step 2 signs `<otp>|<timestamp>` with the session token, in the browser. */
export function superadminView(page) {
  const step2 = h('div');
  replace(page,
    h('h1', {}, t('auth.superadmin_title')),
    h('section', {}, form({ 'aria-label': t('auth.step1') }, [
      h('h2', {}, t('auth.step1')),
      field(t('auth.email'), { name: 'email', type: 'email', autocomplete: 'username', required: true }),
      field(t('auth.password'), { name: 'password', type: 'password', autocomplete: 'current-password', required: true }),
      h('button', { type: 'submit' }, t('auth.continue')),
    ], async (data) => {
      const started = await api('POST', '/auth/superadmin-2fa', {
        identifier_hash: await identifierHash(data.get('email')), password_hash: await sha256Hex(data.get('password')),
      });
      replace(step2, h('section', {}, form({ 'aria-label': t('auth.step2') }, [
        h('h2', {}, t('auth.step2')),
        h('p', { role: 'status' }, t('auth.otp_sent')),
        field(t('auth.otp'), { name: 'otp', inputmode: 'numeric', autocomplete: 'one-time-code', pattern: '[0-9]{6}', maxlength: 6, required: true }),
        h('button', { type: 'submit' }, t('auth.verify')),
      ], async (d) => {
        const timestamp = Math.floor(Date.now() / 1000);
        const hmac = await hmacHex(started.session_token, `${String(d.get('otp')).trim()}|${timestamp}`);
        await signIn(await api('POST', '/auth/superadmin-2fa/verify', { session_token: started.session_token, timestamp, hmac }));
        await signedIn();
      })));
      step2.querySelector('input')?.focus();
    })),
    step2);
}

/**
 * /setup#token=...: the first superadmin, from the link the service logged at its first start (docs/operator.md,
 * "The first superadmin"). The token stays in the fragment, which no request carries; the password is hashed here.
 */
export async function setupView(page) {
  const token = new URLSearchParams(location.hash.slice(1)).get('token') ?? '';
  const open = await api('GET', '/auth/setup').then((r) => r.status === 'open', () => false);
  if (!open) return replace(page, h('h1', {}, t('setup.title')), h('p', {}, t('setup.done')), h('a', { href: '/superadmin', 'data-nav': '' }, t('setup.sign_in')));
  replace(page,
    h('h1', {}, t('setup.title')),
    h('p', { class: 'muted' }, t('setup.intro')),
    h('section', {}, form({ 'aria-label': t('setup.title') }, [
      field(t('auth.email'), { name: 'email', type: 'email', autocomplete: 'username', required: true }),
      field(t('auth.password'), { name: 'password', type: 'password', autocomplete: 'new-password', minlength: 12, required: true }),
      h('button', { type: 'submit' }, t('setup.create')),
    ], async (data) => {
      if (!token) throw new Error(t('setup.no_token'));
      await api('POST', '/auth/setup', { token, email: String(data.get('email')).trim(), password_hash: await sha256Hex(String(data.get('password'))) });
      history.replaceState(null, '', '/setup'); // the token is used up: it leaves the address bar
      replace(page, h('h1', {}, t('setup.title')), h('p', { role: 'status' }, t('setup.created')), h('a', { href: '/superadmin', 'data-nav': '' }, t('setup.sign_in')));
    })));
}
