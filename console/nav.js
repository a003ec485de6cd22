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
