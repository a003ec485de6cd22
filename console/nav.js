// Navigation shared by the shell and the views (kept apart from app.js so views do not import the shell).
let renderPage = () => {};
export const setRenderer = (fn) => { renderPage = fn; };

export function navigate(path, replaceState = false) {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  void renderPage();
}

/** Where to go after signing in: the page that asked for it (a join link), else where the person's work is. */
let afterSignIn = null;
export const rememberTarget = (path) => { afterSignIn = path; };
/** `landing` gives the page for whoever signed in (docs/console.md, "Where a sign-in lands") when no page asked. */
export async function signedIn(landing = async () => '/') {
  const target = afterSignIn;
  afterSignIn = null;
  navigate(target ?? (await landing().catch(() => '/')), true);
}

export function flash(text) {
  document.getElementById('flash').textContent = text ?? '';
}

/**
 * The header's menu on a phone (docs/console.md, "Phone first"): a disclosure button (WAI-ARIA APG, "Disclosure
 * pattern") that shows the navigation below the bar. Escape closes it and gives the button its focus back; so do
 * a click outside the header and every page change. On a wide screen style.css hides the button and shows the
 * navigation in the bar, so the state below only matters on a phone.
 */
const menuButton = () => document.getElementById('menu-button');
export function closeMenu() {
  menuButton().setAttribute('aria-expanded', 'false');
}
export function setUpMenu() {
  const button = menuButton();
  const bar = button.closest('header');
  const isOpen = () => button.getAttribute('aria-expanded') === 'true';
  button.addEventListener('click', () => button.setAttribute('aria-expanded', String(!isOpen())));
  bar.addEventListener('keydown', (e) => {
    if (e.key !== 'Escape' || !isOpen()) return;
    closeMenu();
    button.focus();
  });
  document.addEventListener('click', (e) => { if (isOpen() && !bar.contains(e.target)) closeMenu(); });
}
