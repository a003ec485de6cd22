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

/** The mosque's event stream; a dropped stream is reopened with a fresh ticket (a ticket opens one stream). */
export function openLive(id, status, handlers) {
  let source = null;
  let timer = null;
  let stopped = false;
  const connect = async () => {
    try {
      const { ticket } = await api('POST', `/mosques/${id}/events/ticket`);
      if (stopped) return;
      source = new EventSource(`/api/v1/mosques/${encodeURIComponent(id)}/events/stream?ticket=${encodeURIComponent(ticket)}`);
      source.onopen = () => { status.textContent = t('live.on'); };
      for (const [type, reload] of Object.entries(handlers)) source.addEventListener(type, coalesced(reload));
      source.onerror = () => {
        source.close();
        status.textContent = t('live.off');
        if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
      };
    } catch {
      status.textContent = t('live.off');
      if (!stopped) timer = setTimeout(connect, RECONNECT_MS);
    }
  };
  void connect();
  return () => {
    stopped = true;
    clearTimeout(timer);
    source?.close();
  };
}
