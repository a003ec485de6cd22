import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { asyncApiBreaks, openApiBreaks } from '../../scripts/api-compatibility.ts';
import { DOCS_DIR, generatedDocs } from '../../scripts/docs.ts';

/*
 * docs/api.md#versioning-apiv1-only-grows and docs/firmware.md#7-versions-payloads-only-grow: what the last release
 * published (docs/published/) is a promise to every app and device built against it. The documents the code
 * generates now (what `npm run docs` writes into docs/) must keep all of it: they may add, never take away.
 */

type Doc = Record<string, any>;

const PUBLISHED = path.join(DOCS_DIR, 'published');
const published = (name: string): Doc => JSON.parse(fs.readFileSync(path.join(PUBLISHED, name), 'utf8'));
const current = (name: 'openapi.json' | 'asyncapi.json'): Doc => JSON.parse(generatedDocs()[name]!);

/**
 * Breaks let through on purpose, each exactly as the diff words it, with its reason: only a change that closes a
 * hole (refusing what no honest client sends) belongs here, and docs/api.md#versioning-apiv1-only-grows says
 * how. Emptied when the published copies are refreshed at a release.
 */
const ACCEPTED: { break: string; reason: string }[] = [];

const unaccepted = (breaks: string[]) => breaks.filter((b) => !ACCEPTED.some((a) => a.break === b));

test('the published copies are the v1 documents: OpenAPI 3.1 under /api/v1, AsyncAPI 3.0 with every payload at v "1.0"', () => {
  const http = published('openapi-v1.json');
  assert.equal(http.openapi, '3.1.0');
  assert.equal(http.servers[0].url, '/api/v1');
  assert.ok(Object.keys(http.paths).length > 30, 'the published copy holds the API');
  const mqtt = published('asyncapi-v1.json');
  assert.equal(mqtt.asyncapi, '3.0.0');
  const versions = Object.values<Doc>(mqtt.components.messages).map((m) => JSON.stringify(m.payload.properties.v));
  assert.ok(versions.length >= 8, 'the published copy holds the device payloads');
  assert.deepEqual([...new Set(versions)], ['{"const":"1.0"}']);
});

test('the current OpenAPI document keeps everything the published /api/v1 document promised', () => {
  assert.deepEqual(unaccepted(openApiBreaks(published('openapi-v1.json'), current('openapi.json'))), []);
});

test('the current AsyncAPI document keeps everything the published device interface promised', () => {
  assert.deepEqual(unaccepted(asyncApiBreaks(published('asyncapi-v1.json'), current('asyncapi.json'))), []);
});

test('every accepted break still happens, so the list cannot outlive its reason', () => {
  const all = [
    ...openApiBreaks(published('openapi-v1.json'), current('openapi.json')),
    ...asyncApiBreaks(published('asyncapi-v1.json'), current('asyncapi.json')),
  ];
  assert.deepEqual(ACCEPTED.filter((a) => !all.includes(a.break)), []);
  for (const a of ACCEPTED) assert.match(a.reason, /docs\/\S+\.md#/, `${a.break}: the reason cites docs/`);
});

test('on the real documents, the check names a lost path, a lost field, a lost error code and a new required request field', () => {
  const was = published('openapi-v1.json');
  const now = structuredClone(was);
  delete now.paths['/me/password'];
  delete now.components.schemas.DeviceLogs.properties.logging;
  now.components.responses.Error401.content['application/json'].schema.properties.error.properties.code.enum.pop();
  now.paths['/auth/login'].post.requestBody.content['application/json'].schema.required.push('otp');
  const breaks = openApiBreaks(was, now);
  assert.ok(breaks.includes('/api/v1/me/password: path removed'), breaks.join('\n'));
  assert.ok(breaks.includes('GET /api/v1/devices/{id}/logs: response 200 body.logging: field removed'), breaks.join('\n'));
  assert.ok(breaks.includes('GET /api/v1/me: response 401 body.error.code: enum loses "stale_timestamp"'), breaks.join('\n'));
  assert.ok(breaks.includes('POST /api/v1/auth/login: request body.otp: new required field'), breaks.join('\n'));
});

test('on the real documents, the check names a lost command and a new required field in a heartbeat', () => {
  const was = published('asyncapi-v1.json');
  const now = structuredClone(was);
  now.components.messages.command.payload.properties.name.enum = now.components.messages.command.payload.properties.name.enum.filter((n: string) => n !== 'ping');
  now.components.messages.playerHeartbeat.payload.required.push('free_heap');
  assert.deepEqual(asyncApiBreaks(was, now), [
    'send heartbeat/messages/playerHeartbeat payload.free_heap: was optional, now required',
    'receive cmd/messages/command payload.name: enum loses "ping"',
  ]);
});
