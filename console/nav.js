// Navigation shared by the shell and the views (kept apart from app.js so views do not import the shell).
let renderPage = () => {};
export const setRenderer = (fn) => { renderPage = fn; };

export function navigate(path, replaceState = false) {
  if (replaceState) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  void renderPage();
}

/** Where to go after signing in: the page that asked for it (a join link), else home. */
let afterSignIn = '/';
export const rememberTarget = (path) => { afterSignIn = path; };
export function signedIn() {
  const target = afterSignIn;
  afterSignIn = '/';
  navigate(target, true);
}

export function flash(text) {
  document.getElementById('flash').textContent = text ?? '';
}
