import type { AudioServer, AudioServerResult, ListedClient } from '../src/audio/audio-server.ts';

/** Past this an admin call counts as unanswered: a slow Icecast must not hold a revocation or a probe. */
export const ADMIN_TIMEOUT_MS = 2_000;
/** The admin API's answers are a few KiB of XML; more is not Icecast's. */
const MAX_ANSWER_BYTES = 4 * 1024 * 1024;

/**
 * Icecast 2.4's admin API over HTTP basic with the global admin's credentials
 * (icecast.org/docs/icecast-2.4.1/admin-interface.html): the raw XML answers of listmounts, listclients,
 * killclient and killsource, read with patterns for the few elements used.
 */
export function createIcecastAdminClient(opts: { adminUrl: string; user: string; password: string; timeoutMs?: number }): AudioServer {
  const authorization = `Basic ${Buffer.from(`${opts.user}:${opts.password}`).toString('base64')}`;
  const timeoutMs = opts.timeoutMs ?? ADMIN_TIMEOUT_MS;

  async function call(command: string, params: Record<string, string>): Promise<AudioServerResult<{ status: number; text: string }>> {
    const url = `${opts.adminUrl}/admin/${command}?${new URLSearchParams(params)}`;
    try {
      const res = await fetch(url, { headers: { authorization }, signal: AbortSignal.timeout(timeoutMs), redirect: 'error' });
      const text = await res.text();
      if (text.length > MAX_ANSWER_BYTES) return { ok: false, problem: 'bad_answer', detail: `${command}: answer over ${MAX_ANSWER_BYTES} bytes` };
      if (res.status === 401 || res.status === 403) return { ok: false, problem: 'refused', detail: `${command}: HTTP ${res.status} (ICECAST_ADMIN_USER/ICECAST_ADMIN_PASSWORD)` };
      return { ok: true, value: { status: res.status, text } };
    } catch (err) {
      const e = err as Error & { cause?: { code?: string } };
      return { ok: false, problem: 'unreachable', detail: `${command}: ${e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.cause?.code ?? e.message)}` };
    }
  }

  /** `<return>1</return>` of an iceresponse: done; 0: Icecast did not know the client or source. */
  const returned = (text: string) => /<return>\s*1\s*<\/return>/.test(text);

  return {
    async listMounts() {
      const answer = await call('listmounts', {});
      if (!answer.ok) return answer;
      if (answer.value.status !== 200) return { ok: false, problem: 'bad_answer', detail: `listmounts: HTTP ${answer.value.status}` };
      return { ok: true, value: [...answer.value.text.matchAll(/<source mount="([^"]+)"/g)].map((m) => unescapeXml(m[1]!)) };
    },
    async listClients(mount) {
      const answer = await call('listclients', { mount });
      if (!answer.ok) return answer;
      // 2.4.4 answers 400 "Source does not exist" for a mount without a source.
      if (answer.value.status === 400 && /does not exist/i.test(answer.value.text)) return { ok: true, value: null };
      if (answer.value.status !== 200) return { ok: false, problem: 'bad_answer', detail: `listclients: HTTP ${answer.value.status}` };
      return { ok: true, value: [...answer.value.text.matchAll(/<listener>([\s\S]*?)<\/listener>/g)].map((m) => toClient(m[1]!)).filter((c): c is ListedClient => c !== null) };
    },
    async killClient(mount, clientId) {
      const answer = await call('killclient', { mount, id: String(clientId) });
      if (!answer.ok) return answer;
      if (answer.value.status === 400 && /does not exist/i.test(answer.value.text)) return { ok: true, value: false };
      return { ok: true, value: returned(answer.value.text) };
    },
    async killSource(mount) {
      const answer = await call('killsource', { mount });
      if (!answer.ok) return answer;
      if (answer.value.status === 400 && /does not exist/i.test(answer.value.text)) return { ok: true, value: false };
      return { ok: true, value: returned(answer.value.text) };
    },
  };
}

function toClient(xml: string): ListedClient | null {
  const field = (name: string) => new RegExp(`<${name}>([^<]*)</${name}>`).exec(xml)?.[1] ?? null;
  const id = Number(field('ID'));
  if (!Number.isSafeInteger(id)) return null;
  const connected = Number(field('Connected'));
  return { id, ip: field('IP'), connectedSeconds: Number.isFinite(connected) ? connected : null };
}

function unescapeXml(s: string): string {
  return s.replace(/&(lt|gt|quot|apos|amp);/g, (_, e: string) => ({ lt: '<', gt: '>', quot: '"', apos: "'", amp: '&' })[e]!);
}
