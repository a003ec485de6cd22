import { spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import type { TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { httpClient, type HttpClient } from '../support/service.ts';
import { waitFor } from '../support/devices.ts';
import { ROOT } from '../support/process.ts';
import { freePort } from '../support/redis.ts';

/** HAProxy with deploy/haproxy.cfg (docs/operator.md, "Several hosts") in front of two nodes, as the compose file runs it. */

export const HAPROXY = '/usr/sbin/haproxy';
export const haproxyInstalled = () => fs.existsSync(HAPROXY);

export interface Balancer {
  http: HttpClient;
  mqttUrl: string;
  /** What HAProxy printed (its servers going down and up). */
  output(): string;
}

/** A node behind the balancer: its HTTP and MQTT addresses (host:port). */
export interface Backend {
  http: string;
  mqtt: string;
  /** Where its MQTT over TLS would be; nothing needs to listen there. */
  mqtts: string;
}

/**
 * HAProxy on free ports of 127.0.0.1 in front of nodes A and B; waits until it serves /healthz through one of them
 * (so at least one must be up). Killed when the test ends.
 */
export async function startBalancer(t: TestContext, a: Backend, b: Backend): Promise<Balancer> {
  const [http, mqtt, mqtts] = await Promise.all([freePort(), freePort(), freePort()]);
  const env = {
    ...process.env, MQTT_BIND: `127.0.0.1:${mqtt}`, MQTTS_BIND: `127.0.0.1:${mqtts}`, HTTP_BIND: `127.0.0.1:${http}`,
    NODE_A_MQTT: a.mqtt, NODE_A_MQTTS: a.mqtts, NODE_A_HTTP: a.http,
    NODE_B_MQTT: b.mqtt, NODE_B_MQTTS: b.mqtts, NODE_B_HTTP: b.http,
  };
  assert.equal(spawnSync(HAPROXY, ['-c', '-q', '-f', 'deploy/haproxy.cfg'], { cwd: ROOT, env }).status, 0, 'deploy/haproxy.cfg is valid');
  const lb = spawn(HAPROXY, ['-db', '-f', 'deploy/haproxy.cfg'], { cwd: ROOT, env, stdio: ['ignore', 'pipe', 'pipe'] });
  let output = '';
  for (const s of [lb.stdout, lb.stderr]) s.on('data', (c: Buffer) => (output += c.toString('utf8')));
  const kill = () => void lb.kill('SIGKILL');
  process.once('exit', kill);
  t.after(() => {
    kill();
    process.off('exit', kill);
  });
  const balancer = { http: httpClient(`http://127.0.0.1:${http}`), mqttUrl: `mqtt://127.0.0.1:${mqtt}`, output: () => output };
  await waitFor('the balancer serves', async () => (await balancer.http.get('/healthz').catch(() => ({ status: 0 }))).status === 200, 15_000)
    .catch((err: Error) => assert.fail(`${err.message}; haproxy said: ${output}`));
  return balancer;
}
