/**
 * Support commands of the CLI: they talk to a running service over its HTTP API with a person's token
 * (the commands need the live broker, which only the service process has).
 *   device diagnose <id>   the why answer, a ping and the diag bundle, as a readable report
 *   device timeline <id>   the recent timeline
 * Settings: --url (or MINARET_URL, default http://127.0.0.1:8080) and MINARET_TOKEN (or --token-file <path>).
 */
export class SupportError extends Error {}

export interface ApiTarget {
  url: string;
  token: string;
}

async function call(target: ApiTarget, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  let res: Response;
  try {
    res = await fetch(`${target.url.replace(/\/$/, '')}/api/v1${path}`, {
      method,
      headers: { authorization: `Bearer ${target.token}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      body: body === undefined ? null : JSON.stringify(body),
      signal: AbortSignal.timeout(40_000),
    });
  } catch (err) {
    throw new SupportError(`cannot reach ${target.url}: ${(err as Error).message}`);
  }
  const text = await res.text();
  let parsed: unknown = null;
  try {
    parsed = text ? (JSON.parse(text) as unknown) : null;
  } catch {
    throw new SupportError(`${target.url} answered ${res.status} with a body that is not JSON: is it a Minaret service?`);
  }
  if (res.status === 401) throw new SupportError('the token was refused (401): sign in again and update MINARET_TOKEN or the --token-file');
  return { status: res.status, body: parsed };
}

const errorOf = (r: { status: number; body: any }) => `${r.status} ${r.body?.error?.code ?? ''} ${r.body?.error?.message ?? ''}`.trim();
const line = (label: string, value: unknown) => `  ${label.padEnd(22)} ${typeof value === 'string' ? value : JSON.stringify(value)}`;

export async function diagnose(target: ApiTarget, deviceId: string): Promise<string> {
  const device = await call(target, 'GET', `/devices/${encodeURIComponent(deviceId)}`);
  if (device.status !== 200) throw new SupportError(`device ${deviceId}: ${errorOf(device)}`);
  const why = await call(target, 'GET', `/devices/${encodeURIComponent(deviceId)}/why`);
  const out = [`Device ${deviceId} (${device.body.kind}${device.body.name ? `, "${device.body.name}"` : ''})`];
  out.push(line('status', `${device.body.status} (${device.body.connected ? 'connected' : 'not connected'})`));
  out.push(line('last seen', device.body.last_seen_at ?? 'never'));
  out.push(line('signal', device.body.rssi === null ? 'unknown' : `${device.body.rssi} dBm on ${device.body.ssid ?? '?'}`));
  out.push(line('firmware', device.body.fw ?? 'unknown'));
  out.push('', 'Why:');
  out.push(line('playback', why.body.effective_playback_state), line('deciding field', why.body.deciding_field), line('reason', why.body.reason));
  out.push('', 'Ping:');
  const ping = await call(target, 'POST', `/devices/${encodeURIComponent(deviceId)}/commands`, { name: 'ping', timeout_ms: 5000 });
  out.push(ping.status === 200 ? line('round trip', `${ping.body.rtt_ms} ms`) : line('no answer', errorOf(ping)));
  if (ping.status === 200) {
    const bundle = await call(target, 'POST', `/devices/${encodeURIComponent(deviceId)}/commands`, { name: 'diag_bundle', timeout_ms: 10_000 });
    out.push('', 'Diagnostic bundle:');
    if (bundle.status !== 200 || !bundle.body.ok) out.push(line('no bundle', bundle.status === 200 ? JSON.stringify(bundle.body.result) : errorOf(bundle)));
    else for (const [key, value] of Object.entries(bundle.body.result ?? {})) out.push(line(key, value));
  }
  return out.join('\n');
}

/** `ping`, `ping ok 12 ms`, `diag_bundle failed`, `identify timed out`: the command of a command_* event. */
export function commandSummary(kind: unknown, detail: Record<string, any> | null | undefined): string {
  if (typeof kind !== 'string' || !kind.startsWith('command_') || !detail?.name) return '';
  const name = String(detail.name);
  if (kind === 'command_acked') return `${name} ${detail.ok ? 'ok' : 'failed'}${typeof detail.rtt_ms === 'number' ? ` ${detail.rtt_ms} ms` : ''}`;
  if (kind === 'command_timeout') return `${name} timed out`;
  return name;
}

export async function timeline(target: ApiTarget, deviceId: string, limit = 30): Promise<string> {
  const events = await call(target, 'GET', `/devices/${encodeURIComponent(deviceId)}/events?limit=${limit}`);
  if (events.status !== 200) throw new SupportError(`device ${deviceId}: ${errorOf(events)}`);
  const rows = (events.body as Array<Record<string, any>>).map((e) => {
    // A command_* event names its command: `ping ok 12 ms` reads better than a bare kind.
    const change = e.from || e.to ? `${e.from ?? '?'} -> ${e.to ?? '?'}` : commandSummary(e.kind, e.detail);
    return `${e.at}  ${String(e.kind).padEnd(18)} ${change.padEnd(24)} ${e.reason ?? ''}`.trimEnd();
  });
  return [`Timeline of ${deviceId}, newest first:`, ...(rows.length ? rows : ['  (empty)'])].join('\n');
}
