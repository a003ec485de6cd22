/**
 * One measured page load in Chromium for bench/console/first-load.ts: the network conditions (Chrome DevTools' own
 * presets), every response's encoded bytes from the DevTools protocol, and the moments the page became
 * usable, read from inside the page (a MutationObserver and the longtask PerformanceObserver, installed
 * before the page's own script runs).
 */
import type { BrowserContext, CDPSession, Page } from 'playwright-core';

export interface NetworkConditions {
  offline: false;
  /** Added to every request's round trip, in ms. */
  latency: number;
  /** Bytes per second; -1 for no limit. */
  downloadThroughput: number;
  uploadThroughput: number;
}

/**
 * Chrome DevTools' "Fast 3G" preset, as its source defines it (front_end/core/sdk/NetworkManager.ts,
 * `Fast3GConditions`, renamed "Slow 4G" in 2024 with the same figures): latency 150 * 3.75 = 562.5 ms,
 * download 1.6 Mbit/s * 0.9 = 180,000 B/s, upload 750 kbit/s * 0.9 = 84,375 B/s. DevTools before 2021
 * multiplied by 1024 (188,744 B/s down): the decimal figures are the slower, stricter ones.
 */
export const FAST_3G: NetworkConditions = {
  offline: false,
  latency: 150 * 3.75,
  downloadThroughput: ((1.6 * 1000 * 1000) / 8) * 0.9,
  uploadThroughput: ((750 * 1000) / 8) * 0.9,
};
export const UNTHROTTLED: NetworkConditions = { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 };

/** "Usable" is measured as quiet: no long task (50 ms or more on the main thread) for this long after it. */
export const QUIET_MS = 500;

/**
 * Runs in every document before its own scripts (CDP's addScriptToEvaluateOnNewDocument, which the page's
 * CSP does not govern). Marks, in ms from navigation start: `signin` when the password form with its
 * submit button is in the page (form() wires its submit handler before inserting it), `submit` when the
 * person submits, `member` when Home lists a player (the last thing that page renders), each `*_frame` one
 * frame later (painted); and every long task.
 */
export const PAGE_PROBE = `(() => {
  const probe = { longtasks: [], marks: {} };
  Object.defineProperty(window, '__consoleBench', { value: probe });
  try {
    new PerformanceObserver((list) => {
      for (const e of list.getEntries()) probe.longtasks.push([e.startTime, e.startTime + e.duration]);
    }).observe({ type: 'longtask', buffered: true });
  } catch {}
  const mark = (name) => {
    if (probe.marks[name] !== undefined) return;
    probe.marks[name] = performance.now();
    requestAnimationFrame(() => setTimeout(() => { probe.marks[name + '_frame'] = performance.now(); }, 0));
  };
  const check = () => {
    if (document.querySelector('main form input[type=password]') && document.querySelector('main form button[type=submit]')) mark('signin');
    if (document.querySelector('main li[data-device]')) mark('member');
  };
  new MutationObserver(check).observe(document, { childList: true, subtree: true });
  document.addEventListener('submit', () => { if (probe.marks.submit === undefined) probe.marks.submit = performance.now(); }, true);
})();`;

export interface Resource {
  /** The full URL, and the path with the build hash written as <build> (the same in every run). */
  url: string;
  path: string;
  type: string;
  status: number;
  encoding: string;
  /** Bytes on the wire: headers plus the encoded body (0 when served from the browser's cache). */
  bytes: number;
  fromCache: boolean;
  /** ms from the navigation's first request. */
  start: number;
  end: number;
  /** 'load' before the person submits the sign-in form, 'signin' after. */
  phase: 'load' | 'signin';
}

/** Records every request of a page through the DevTools protocol, tagged with the phase it started in. */
export async function recordNetwork(context: BrowserContext, page: Page, conditions: NetworkConditions) {
  const cdp: CDPSession = await context.newCDPSession(page);
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', conditions);
  let phase: Resource['phase'] = 'load';
  let origin = 0;
  const open = new Map<string, Partial<Resource> & { t0: number }>();
  let done: Resource[] = [];
  const relative = (ts: number) => Math.round((ts - origin) * 1000);
  cdp.on('Network.requestWillBeSent', (e) => {
    if (e.type === 'Document') origin = e.timestamp;
    const url = new URL(e.request.url);
    open.set(e.requestId, { url: e.request.url, path: url.pathname.replace(/^\/c\/[0-9a-f]{12}\//, '/c/<build>/') + url.search, type: e.type ?? '', phase, t0: e.timestamp, fromCache: false, status: 0, encoding: '' });
  });
  cdp.on('Network.requestServedFromCache', (e) => {
    const r = open.get(e.requestId);
    if (r) r.fromCache = true;
  });
  cdp.on('Network.responseReceived', (e) => {
    const r = open.get(e.requestId);
    if (!r) return;
    r.status = e.response.status;
    const headers = Object.fromEntries(Object.entries(e.response.headers).map(([k, v]) => [k.toLowerCase(), String(v)]));
    r.encoding = headers['content-encoding'] ?? '';
    if (e.response.fromDiskCache || e.response.fromPrefetchCache) r.fromCache = true;
  });
  cdp.on('Network.loadingFinished', (e) => {
    const r = open.get(e.requestId);
    if (!r) return;
    open.delete(e.requestId);
    done.push({ ...(r as Resource), bytes: r.fromCache ? 0 : e.encodedDataLength, start: relative(r.t0), end: relative(e.timestamp) });
  });
  return {
    setPhase: (p: Resource['phase']) => { phase = p; },
    /** What finished since the last take; a new navigation starts a new list. */
    take: (): Resource[] => {
      const out = done.sort((a, b) => a.start - b.start);
      done = [];
      return out;
    },
    close: () => cdp.detach(),
  };
}

interface Probe {
  longtasks: Array<[number, number]>;
  marks: Record<string, number>;
}

const readProbe = (page: Page) => page.evaluate(() => (globalThis as unknown as { __consoleBench: Probe }).__consoleBench);

/** The first moment at or after `from` followed by QUIET_MS without a long task starting. */
export function quietFrom(from: number, longtasks: Array<[number, number]>): number {
  let t = from;
  for (const [start, end] of [...longtasks].sort((a, b) => a[0] - b[0])) {
    if (end <= t) continue;
    if (start >= t + QUIET_MS) break;
    t = Math.max(t, end);
  }
  return t;
}

/**
 * Waits for a mark, then for the quiet window after it to have really passed, and returns
 * { at: the mark's frame, interactive: the start of the quiet window } in ms from navigation start.
 */
export async function waitUsable(page: Page, mark: string, timeoutMs: number): Promise<{ at: number; interactive: number; marks: Record<string, number> }> {
  await page.waitForFunction((name) => (globalThis as unknown as { __consoleBench?: Probe }).__consoleBench?.marks[`${name}_frame`] !== undefined, mark, { timeout: timeoutMs, polling: 50 });
  for (;;) {
    const probe = await readProbe(page);
    const at = probe.marks[`${mark}_frame`]!;
    const interactive = quietFrom(at, probe.longtasks);
    const now = await page.evaluate(() => performance.now());
    if (now >= interactive + QUIET_MS) return { at, interactive, marks: probe.marks };
    await page.waitForTimeout(Math.ceil(interactive + QUIET_MS - now) + 10);
  }
}
