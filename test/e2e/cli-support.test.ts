import http from 'node:http';
import type { AddressInfo } from 'node:net';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { before, test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { SimDevice } from '../../simulator/device.ts';
import { member } from '../support/people.ts';
import { ensureBuilt, runNode, type Finished } from '../support/process.ts';
import { startTestService, type TestService } from '../support/service.ts';
import { mosqueWithOwner, registerPlayer, registerTransmitter, waitFor, type Registered } from '../support/devices.ts';

// The support commands of the CLI (cli/support.ts): `device diagnose <id>` and `device timeline <id>`,
// run as a separate process against a running service over its HTTP API, the way an operator runs them.

before(ensureBuilt); // bin/minaret.mjs runs the compiled CLI



/**
 * `node bin/minaret.mjs ...args`, the compiled CLI as an operator runs it (a third of the CPU of the sources through
 * tsx, which counts with sixteen at once), with no MINARET_* settings from this environment.
 */
function cli(args: string[], extraEnv: Record<string, string> = {}): Promise<Finished> {
  return runNode(['bin/minaret.mjs', ...args], { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? os.tmpdir(), NODE_ENV: 'test', ...extraEnv });
}

/** A failure: non-zero exit, nothing on stdout, exactly one line on stderr (returned). */
function oneLineFailure(run: Finished, what: string): string {
  assert.notEqual(run.code, 0, `${what}: exit code`);
  assert.equal(run.stderrLines.length, 1, `${what}: one line on stderr, got ${JSON.stringify(run.stderrLines)}`);
  assert.equal(run.stdout, '', `${what}: nothing on stdout`);
  return run.stderrLines[0]!;
}

async function startSim(t: TestContext, reg: Registered, kind: 'transmitter' | 'stream_player') {
  const sim = new SimDevice({ kind, id: reg.device.id, password: reg.credentials.password, mqttUrl: reg.credentials.mqtt_url, startTimeoutMs: 5000 });
  t.after(() => sim.stop({ graceful: false }));
  await sim.start();
  return sim;
}

async function world(t: TestContext) {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const { root, owner, mosque } = await mosqueWithOwner(ts, { stream_url: 'https://radio.example.test/live' });
  const listener = await member(ts, 'listener@example.com');
  const enrolled = await ts.http.post(`/api/v1/mosques/${mosque.id}/memberships`, { user_id: listener.id }, root.token);
  assert.equal(enrolled.status, 201);
  const player = await registerPlayer(ts, listener, mosque.id);
  return { ts, root, owner, listener, mosque, player };
}

const DIAG_KEYS = ['transitions', 'config_version', 'uptime_s', 'reset_reason', 'free_heap', 'wifi', 'broker', 'last_error'];

test('device diagnose: why, a ping round trip and the diag bundle of a connected player; exit 0', async (t) => {
  const w = await world(t);
  const id = w.player.device.id;
  const sim = await startSim(t, w.player, 'stream_player');
  await waitFor('player ONLINE', () => sim.status === 'ONLINE', 3000);

  const run = await cli(['device', 'diagnose', id, '--url', w.ts.url], { MINARET_TOKEN: w.listener.token });
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.deepEqual(run.stderrLines, []);
  const out = run.stdout;
  assert.match(out, new RegExp(`^Device ${id} \\(stream_player, "kitchen"\\)`));
  assert.match(out, /status\s+ONLINE \(connected\)/);
  assert.match(out, new RegExp(`signal\\s+-\\d+ dBm on ${sim.ssid}`));
  assert.match(out, new RegExp(`firmware\\s+${sim.fw.replace(/[.]/g, '\\.')}`));
  // The why answer: its state, deciding field and reason.
  assert.match(out, /Why:\n/);
  assert.match(out, /playback\s+(ready|playing)\n/);
  assert.match(out, /deciding field\s+\S+/);
  assert.match(out, /reason\s+/);
  // The ping's round trip in ms.
  assert.match(out, /Ping:\n\s+round trip\s+\d+ ms/);
  // The bundle, one line per field.
  assert.match(out, /Diagnostic bundle:\n/);
  for (const key of DIAG_KEYS) assert.match(out, new RegExp(`^\\s+${key}\\s+\\S`, 'm'), `bundle line ${key}`);
  assert.match(out, /^\s+reset_reason\s+power_on$/m);
  assert.match(out, new RegExp(`^\\s+config_version\\s+${sim.configVersion}$`, 'm'));
  assert.match(out, /^\s+transitions\s+\[.*"to":"ONLINE"/m);
  assert.equal(sim.counters.commands, 2, 'ping and diag_bundle reached the device');

  // The timeline now shows the two commands; `device timeline` lists them with the connection and the status.
  // The token from a file (--token-file), as a cron job or a shared support box would keep it.
  const tokenFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-token-')), 'token');
  fs.writeFileSync(tokenFile, `${w.listener.token}\n`, { mode: 0o600 });
  t.after(() => fs.rmSync(path.dirname(tokenFile), { recursive: true, force: true }));
  const tl = await cli(['device', 'timeline', id, '--url', w.ts.url, '--token-file', tokenFile]);
  assert.equal(tl.code, 0, tl.stderrLines.join('\n'));
  assert.deepEqual(tl.stderrLines, []);
  const lines = tl.stdout.trimEnd().split('\n');
  assert.equal(lines[0], `Timeline of ${id}, newest first:`);
  const kinds = lines.slice(1).map((l) => l.split(/\s+/)[1]);
  for (const kind of ['command_sent', 'command_acked', 'connected', 'status', 'registered']) assert.ok(kinds.includes(kind), `timeline lists ${kind}: ${tl.stdout}`);
  assert.equal(kinds.filter((k) => k === 'command_acked').length, 2);
  assert.match(tl.stdout, /status\s+UNKNOWN -> UNBOUND|status\s+\S+ -> ONLINE/);
  for (const l of lines.slice(1)) assert.match(l, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z  \S+/, `an ISO time first: ${l}`);
  // Newest first: the last command is on top.
  assert.equal(kinds[0], 'command_acked');
});

test('device diagnose of a transmitter by its mosque owner; MINARET_URL stands in for --url', async (t) => {
  const w = await world(t);
  const tx = await registerTransmitter(w.ts, w.owner.token, w.mosque.id);
  const sim = await startSim(t, tx, 'transmitter');
  await waitFor('transmitter ONLINE', () => sim.status === 'ONLINE', 3000);
  const run = await cli(['device', 'diagnose', tx.device.id], { MINARET_URL: w.ts.url, MINARET_TOKEN: w.owner.token });
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.match(run.stdout, /\(transmitter, "minbar"\)/);
  assert.match(run.stdout, /round trip\s+\d+ ms/);
  assert.match(run.stdout, /^\s+free_heap\s+\d+$/m);
});

test('device diagnose of a device that is not connected: why, and the ping says device_offline (no bundle); exit 0', async (t) => {
  const w = await world(t);
  const run = await cli(['device', 'diagnose', w.player.device.id, '--url', w.ts.url], { MINARET_TOKEN: w.listener.token });
  assert.equal(run.code, 0, run.stderrLines.join('\n'));
  assert.match(run.stdout, /status\s+UNKNOWN \(not connected\)/);
  assert.match(run.stdout, /last seen\s+never/);
  assert.match(run.stdout, /playback\s+unknown/);
  assert.match(run.stdout, /no answer\s+409 device_offline/);
  assert.doesNotMatch(run.stdout, /Diagnostic bundle/);
});

async function textServer(t: TestContext): Promise<string> {
  const server = http.createServer((_req, res) => {
    res.writeHead(200, { 'content-type': 'text/html' });
    res.end('<html>not minaret</html>');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

test('device diagnose / timeline failures: non-zero exit and one line on stderr', async (t) => {
  const w: { ts: TestService; listener: { token: string }; player: Registered } & Record<string, unknown> = await world(t);
  const id = w.player.device.id;
  const stranger = await member(w.ts, 'stranger@example.com');
  const closedPort = await (async () => {
    // A port that was just free: nothing listens there.
    const s = http.createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const port = (s.address() as AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    return port;
  })();
  const notMinaret = await textServer(t);

  const tokenFile = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'minaret-token-')), 'token');
  fs.writeFileSync(tokenFile, `${w.listener.token}\n`, { mode: 0o600 });
  t.after(() => fs.rmSync(path.dirname(tokenFile), { recursive: true, force: true }));
  const as = (token: string) => ({ MINARET_TOKEN: token });
  const listener = as(w.listener.token);
  const cases: Array<[string, string[], Record<string, string>, RegExp]> = [
    ['diagnose without a token', ['device', 'diagnose', id, '--url', w.ts.url], {}, /set MINARET_TOKEN or pass --token-file/],
    ['timeline without a token', ['device', 'timeline', id, '--url', w.ts.url], {}, /set MINARET_TOKEN or pass --token-file/],
    // Arguments show in `ps`, shell history and npm's banner: a token there is refused, and never echoed.
    ['a token in the arguments', ['device', 'diagnose', id, '--url', w.ts.url, '--token', w.listener.token], {}, /--token is refused: .*process list/],
    ['a token in the arguments, even with MINARET_TOKEN set', ['device', 'diagnose', id, '--url', w.ts.url, `--token=${w.listener.token}`], listener, /--token is refused/],
    ['--token-file without a value', ['device', 'diagnose', id, '--url', w.ts.url, '--token-file'], {}, /--token-file needs a value/],
    ['--token-file that does not exist', ['device', 'diagnose', id, '--url', w.ts.url, '--token-file', `${tokenFile}.missing`], {}, /--token-file: cannot read .*\(ENOENT\)/],
    ['without a device id', ['device', 'diagnose', '--url', w.ts.url], listener, /needs a device id/],
    ['unknown device (diagnose)', ['device', 'diagnose', 'no-such-device', '--url', w.ts.url], listener, /no-such-device.*404 not_found/],
    ['unknown device (timeline)', ['device', 'timeline', 'no-such-device', '--url', w.ts.url, '--token-file', tokenFile], {}, /no-such-device.*404 not_found/],
    ['a device the caller may not see', ['device', 'diagnose', id, '--url', w.ts.url], as(stranger.token), /404 not_found/],
    ['a refused token', ['device', 'diagnose', id, '--url', w.ts.url], as('not-a-jwt'), /token was refused \(401\)/],
    ['unreachable url (diagnose)', ['device', 'diagnose', id, '--url', `http://127.0.0.1:${closedPort}`], listener, /cannot reach http:\/\/127\.0\.0\.1:\d+/],
    ['unreachable url (timeline)', ['device', 'timeline', id, '--url', `http://127.0.0.1:${closedPort}`], listener, /cannot reach/],
    ['a url that is not a url', ['device', 'diagnose', id, '--url', 'not a url'], listener, /cannot reach not a url/],
    ['a server that is not Minaret', ['device', 'diagnose', id, '--url', notMinaret], listener, /not JSON|not a Minaret/],
    ['unknown subcommand', ['device', 'reboot', id, '--url', w.ts.url], listener, /^minaret: usage:/],
  ];
  const runs = await Promise.all(cases.map(([, args, env]) => cli(args, env)));
  const failures: string[] = [];
  cases.forEach(([what, , , pattern], i) => {
    try {
      const line = oneLineFailure(runs[i]!, what);
      assert.match(line, /^minaret: /, what);
      assert.match(line, pattern, what);
      assert.doesNotMatch(line, /\bat .*\.ts:\d+/, `${what}: no stack trace`);
      assert.ok(!line.includes(w.listener.token) && !line.includes(stranger.token), `${what}: the token is never echoed`);
    } catch (err) {
      failures.push(`${what}: ${(err as Error).message.split('\n')[0]}`);
    }
  });
  assert.deepEqual(failures, []);
});
