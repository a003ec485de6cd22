// The console's shell: language, navigation and a tiny router over history.pushState.
import { api, currentUser, onSessionChange, restoreSession, signOut } from './api.js';
import { h, replace } from './dom.js';
import { chosenLanguage, setLanguage, t } from './i18n.js';
import { closeMenu, flash, navigate, rememberTarget, setRenderer, setUpMenu } from './nav.js';

const main = document.getElementById('main');
let stopCurrent = null; // the open page's cleanup (an EventSource, a timer)

// A view's module loads when its route first opens: a phone on a slow link fetches only the sign-in page's
// code before it can sign in (index.html preloads that much); warmViews() fetches the rest afterwards
// (bench/RESULTS.md, "Console first load").
const ROUTES = [
  [/^\/signin$/, () => import('./views/auth.js').then((m) => m.signInView), false],
  [/^\/signup$/, () => import('./views/auth.js').then((m) => m.signUpView), false],
  [/^\/superadmin$/, () => import('./views/auth.js').then((m) => m.superadminView), false],
  [/^\/setup$/, () => import('./views/auth.js').then((m) => m.setupView), false],
  // Signed out too: the link names its mosque before anyone signs in (docs/api.md, "Join links").
  [/^\/join\/([A-Za-z0-9_-]+)$/, () => import('./views/member.js').then((m) => m.joinView), false],
  [/^\/mosques\/([^/]+)$/, () => import('./views/admin.js').then((m) => m.mosqueView), true],
  [/^\/mosques\/([^/]+)\/schedule$/, () => import('./views/schedule.js').then((m) => m.scheduleView), true],
  [/^\/mosques\/([^/]+)\/devices$/, () => import('./views/device.js').then((m) => m.fleetView), true],
  [/^\/mosques\/([^/]+)\/team$/, () => import('./views/team.js').then((m) => m.teamView), true],
  [/^\/mosques\/([^/]+)\/members$/, () => import('./views/members.js').then((m) => m.membersView), true],
  [/^\/mosques\/([^/]+)\/members\/([^/]+)$/, () => import('./views/members.js').then((m) => m.memberView), true],
  [/^\/mosques\/([^/]+)\/activity$/, () => import('./views/admin.js').then((m) => m.activityView), true],
  [/^\/mosques\/([^/]+)\/settings$/, () => import('./views/settings.js').then((m) => m.settingsView), true],
  [/^\/mosques\/([^/]+)\/print$/, () => import('./views/team.js').then((m) => m.printView), true],
  [/^\/pair$/, () => import('./views/device.js').then((m) => m.pairView), true],
  [/^\/devices\/([^/]+)$/, () => import('./views/device.js').then((m) => m.deviceView), true],
  [/^\/admin$/, () => import('./views/super.js').then((m) => m.superView), true],
  [/^\/admin\/firmware$/, () => import('./views/super/firmware.js').then((m) => m.firmwareView), true],
  [/^\/account$/, () => import('./views/account.js').then((m) => m.accountView), true],
  [/^\/$/, () => import('./views/member.js').then((m) => m.homeView), true],
];

/** Once the first page is up, every other view is fetched while the person reads or types. */
function warmViews() {
  const later = window.requestIdleCallback ?? ((fn) => setTimeout(fn, 200));
  later(() => ROUTES.forEach(([, load]) => void load().catch(() => {})));
}

async function render() {
  stopCurrent?.();
  stopCurrent = null;
  flash('');
  renderNav();
  const path = location.pathname;
  const route = ROUTES.find(([re]) => re.test(path));
  if (!route) return replace(main, h('h1', {}, t('page.not_found')), h('a', { href: '/', 'data-nav': '' }, t('nav.home')));
  const [re, view, needsUser] = route;
  if (needsUser && !currentUser()) {
    rememberTarget(path + location.search); // a filter in the query (the fleet's state) survives signing in again
    history.replaceState(null, '', '/signin');
    return render();
  }
  const params = path.match(re).slice(1);
  const page = h('div');
  replace(main, page);
  try {
    stopCurrent = (await (await view())(page, ...params)) ?? null;
  } catch (err) {
    replace(page, h('p', { class: 'error', role: 'alert' }, err.message));
  }
  if (currentUser() && /^\/(mosques|admin)(\/|$)/.test(path)) void healthNotice(page);
  // A mosque's tabs scroll sideways on a phone: the open one is brought into view (style.css, nav.tabs).
  main.querySelector('nav.tabs [aria-current=page]')?.scrollIntoView({ block: 'nearest', inline: 'nearest' });
  const heading = main.querySelector('h1');
  document.title = heading ? `${heading.textContent} · Minaret` : 'Minaret';
  main.focus({ preventScroll: true }); window.scrollTo(0, 0); // a screen reader hears the new page, keyboard users start from its top
}

/**
 * On the pages of those who run a mosque or the service: a part this node can do without (the audio server) that is
 * down is named above the page (docs/operator.md, "Health"). The API and the devices go on; listening does not.
 */
async function healthNotice(page) {
  const health = await fetch('/healthz', { headers: { accept: 'application/json' } }).then((r) => r.json()).catch(() => null);
  const down = health ? Object.entries(health).filter(([part, state]) => part !== 'status' && part !== 'db' && part !== 'broker' && state === 'down').map(([part]) => part) : [];
  if (down.length === 0 || !page.isConnected) return;
  page.prepend(h('p', { class: 'warn', role: 'status', 'data-health': down.join(' ') }, down.map((part) => t(`health.${part}_down`)).join(' ')));
}

function renderNav() {
  const user = currentUser();
  const link = (href, key) => h('a', { href, 'data-nav': '' }, t(key));
  replace(document.getElementById('nav'), user
    ? [link('/', 'nav.home'), user.role === 'superadmin' && link('/admin', 'nav.superadmin'),
      h('span', { class: 'muted-light who', title: user.email }, user.email), link('/account', 'nav.account'),
      h('button', { type: 'button', class: 'link', onclick: () => void signOutHere() }, t('nav.sign_out'))]
    : [link('/signin', 'nav.sign_in'), link('/signup', 'nav.sign_up')]);
  closeMenu();
  document.getElementById('menu-label').textContent = t('nav.menu');
  document.getElementById('lang-label').textContent = t('nav.language');
  document.querySelector('.skip').textContent = t('nav.skip');
}

/**
 * This token stops working on the server too (docs/api.md, "Signing out"), and with it the console session it was
 * minted from: the answer clears the cookie. The page forgets the token either way.
 */
async function signOutHere() {
  await api('POST', '/auth/logout').catch(() => {});
  signOut();
}

// Same-origin links move inside the page; everything else behaves as a link.
document.addEventListener('click', (e) => {
  const a = e.target.closest?.('a[data-nav]');
  if (!a || e.ctrlKey || e.metaKey || e.shiftKey) return;
  e.preventDefault();
  navigate(a.getAttribute('href'));
});
setRenderer(render);
setUpMenu();
window.addEventListener('popstate', () => void render());
onSessionChange(() => {
  if (!currentUser()) navigate('/signin', true);
});

const select = document.getElementById('lang');
select.addEventListener('change', async () => {
  await setLanguage(select.value, true);
  await render();
});
// A reload stays signed in: the session cookie, if any, gives this page its token before the first render. Asked
// for alongside the language's strings, so on a slow link it costs no round trip of its own.
const restoring = restoreSession();
await setLanguage(chosenLanguage());
select.value = document.documentElement.lang;
await restoring;
await render();
warmViews();
