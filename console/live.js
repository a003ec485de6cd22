// The mosque's live event stream (the API's Server-Sent Events, never MQTT), shared by the admin's pages.
import { api } from './api.js';
import { t } from './i18n.js';

const RECONNECT_MS = 5_000;

/**
 * One reload at a time: events arriving while one runs ask for a single reload after it (a reconnect storm
 * of a hundred devices costs two reads of the list, not a hundred).
 */
function coalesced(reload) {
  let running = false;
  let again = false;
  const run = async () => {
    if (running) { again = true; return; }
    running = true;
    try { await reload(); } catch { /* the next event or the reconnect reads again */ }
    running = false;
    if (again) { again = false; void run(); }
  };
  return () => void run();
}

/** Shows the stream's state in words and as a class the style sheet colours (a reconnecting page says so). */
function show(status, state) {
  status.textContent = t(`live.${state}`);
  status.dataset.live = state;
}

/** The mosque's event stream; a dropped stream is reopened with a fresh ticket (a ticket opens one stream). */
export function openLive(id, status, handlers) {
  // One coalesced reload per handler function: the schedule page gives the same one for two event types.
  const byFunction = new Map();
  const reloads = Object.fromEntries(Object.entries(handlers).map(([type, reload]) => {
    if (!byFunction.has(reload)) byFunction.set(reload, coalesced(reload));
    return [type, byFunction.get(reload)];
  }));
  let source = null;
  let timer = null;
  let stopped = false;
  const connect = async () => {
    try {
      const { ticket } = await api('POST', `/mosques/${id}/events/ticket`);
      if (stopped) return;
      source = new EventSource(`/api/v1/mosques/${encodeURIComponent(id)}/events/stream?ticket=${encodeURIComponent(ticket)}`);
      // What changed before the stream opened (between the page's first read and now, or while a dropped
      // stream was away) sent no event this page heard: read once more on every open. Without it, a device
      // that came online while the fleet page was opening stayed "offline" there until the next event.
      source.onopen = () => {
        show(status, 'on');
        for (const reload of new Set(Object.values(reloads))) reload();
      };
      for (const [type, reload] of Object.entries(reloads)) source.addEventListener(type, reload);
      source.onerror = () => {
        source.close();
        show(status, 'off');
        if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
      };
    } catch {
      show(status, 'off');
      if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
    }
  };
  show(status, 'connecting');
  void connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    source?.close();
  };
}
