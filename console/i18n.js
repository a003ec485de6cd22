// One catalogue per language under i18n/; adding Urdu means adding ur.json and one <option>.
const RTL = new Set(['ar', 'ur', 'fa', 'he']);
export const LANGUAGES = ['en', 'ar'];
let strings = {};
let fallback = {};
let current = 'en';

async function load(lang) {
  const res = await fetch(new URL(`./i18n/${lang}.json`, import.meta.url));
  if (!res.ok) throw new Error(`no catalogue for ${lang}`);
  return res.json();
}

/** The user's pick (kept for this browser), else the browser's first language we have, else English. */
export function chosenLanguage() {
  const picked = localStorage.getItem('minaret.lang');
  if (picked && LANGUAGES.includes(picked)) return picked;
  for (const tag of navigator.languages ?? [navigator.language]) {
    const base = String(tag).toLowerCase().split('-')[0];
    if (LANGUAGES.includes(base)) return base;
  }
  return 'en';
}

export async function setLanguage(lang, remember = false) {
  if (remember) localStorage.setItem('minaret.lang', lang);
  fallback = Object.keys(fallback).length ? fallback : await load('en');
  strings = lang === 'en' ? fallback : await load(lang);
  current = lang;
  document.documentElement.lang = lang;
  document.documentElement.dir = RTL.has(lang) ? 'rtl' : 'ltr';
}

export const language = () => current;

/**
 * A plural form by the language's CLDR rules (Intl.PluralRules): `key.one`, `key.two`, `key.few`... chosen by
 * `count`, else `key.other`; English falls back by its own rule (Arabic has zero/one/two/few/many/other).
 */
function pluralText(key, count) {
  if (typeof count !== 'number' || !(`${key}.other` in strings || `${key}.other` in fallback)) return undefined;
  const own = new Intl.PluralRules(current).select(count);
  const english = new Intl.PluralRules('en').select(count);
  return strings[`${key}.${own}`] ?? strings[`${key}.other`] ?? fallback[`${key}.${english}`] ?? fallback[`${key}.other`];
}

/**
 * t('why.offline_since', {since}) -> the catalogue's text with {since} filled in. With a numeric `count` and
 * `key.other` in the catalogue, the plural form for that count; {count} is written in the language's digits.
 */
export function t(key, vars = {}) {
  const text = pluralText(key, vars.count) ?? strings[key] ?? fallback[key] ?? key;
  const filled = typeof vars.count === 'number' ? { ...vars, count: new Intl.NumberFormat(current).format(vars.count) } : vars;
  return text.replace(/\{(\w+)\}/g, (_, name) => (filled[name] ?? `{${name}}`));
}

/** "3 minutes ago"-style text in the current language. */
export function ago(iso) {
  if (!iso) return t('time.never');
  const seconds = Math.round((Date.parse(iso) - Date.now()) / 1000);
  const rtf = new Intl.RelativeTimeFormat(current, { numeric: 'auto' });
  const abs = Math.abs(seconds);
  if (abs < 60) return rtf.format(seconds, 'second');
  if (abs < 3600) return rtf.format(Math.round(seconds / 60), 'minute');
  if (abs < 86400) return rtf.format(Math.round(seconds / 3600), 'hour');
  return rtf.format(Math.round(seconds / 86400), 'day');
}

export function when(iso) {
  return iso ? new Intl.DateTimeFormat(current, { dateStyle: 'medium', timeStyle: 'short' }).format(new Date(iso)) : t('time.never');
}
