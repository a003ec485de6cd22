import { test } from 'node:test';
import assert from 'node:assert/strict';
import { shownStore, startupSummary, type StartupFacts } from '../../src/platform/log.ts';

/** docs/operator.md, "Reading the log": the block a person at a terminal reads first. */
const FIRST_START: StartupFacts = {
  consoleUrl: 'http://127.0.0.1:8080', setupUrl: 'http://127.0.0.1:8080/setup#token=abc', httpPort: 8080, mqttPort: 1883,
  mqttsPort: null, store: 'SQLite data/minaret.db', audioUrl: null, notifyTransport: 'console',
};

test('the first start names the console, the setup link, the ports, the store, the audio and where codes go', () => {
  const block = startupSummary(FIRST_START);
  for (const part of ['http://127.0.0.1:8080/', 'http://127.0.0.1:8080/setup#token=abc', 'port 8080', 'port 1883', 'SQLite data/minaret.db', 'Audio', 'off', 'NOTIFY_TRANSPORT=console']) {
    assert.ok(block.includes(part), `${part} in\n${block}`);
  }
});

test('once a superadmin exists there is no setup line; MQTTS, Icecast and smtp are named when on', () => {
  const block = startupSummary({ ...FIRST_START, setupUrl: null, mqttsPort: 8883, audioUrl: 'https://audio.example.org', notifyTransport: 'smtp' });
  assert.ok(!block.includes('Set up'));
  assert.ok(block.includes('MQTT over TLS on port 8883'));
  assert.ok(block.includes('Icecast at https://audio.example.org'));
  assert.ok(block.includes('sent by smtp'));
});

test('a PostgreSQL store is shown without its password', () => {
  assert.equal(shownStore('data/minaret.db', null), 'SQLite data/minaret.db');
  const shown = shownStore('ignored', 'postgres://minaret:s3cret@db.example.org:5432/minaret');
  assert.ok(!shown.includes('s3cret'), shown);
  assert.ok(shown.includes('db.example.org:5432/minaret'));
});
