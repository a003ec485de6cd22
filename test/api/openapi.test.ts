import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { Validator } from '@seriousme/openapi-schema-validator';
import { startTestService, type HttpResult, type TestService } from '../support/service.ts';
import { confirmAddress, createMosque, joinMosque, member, signInSuperadmin } from '../support/people.ts';
import { connectDevice, heartbeatPayload, publish, registerPlayer, registerTransmitter, statusPayload, waitForStatus } from '../support/devices.ts';
import { DOCS_DIR, generatedDocs } from '../../scripts/docs.ts';
import { createAjv } from '../support/json-schema.ts';
import { httpStatus } from '../../api/errors.ts';
import { ROUTE_DOCS } from '../../api/openapi.ts';

const toOpenApiPath = (p: string) => p.replace(/:(\w+)/g, '{$1}');
type Doc = Record<string, any>;

/** `METHOD /full/path` of every operation, with the document's server base put back in front. */
function documentedRoutes(doc: Doc): Set<string> {
  const base: string = doc.servers[0].url;
  const out = new Set<string>();
  for (const [p, item] of Object.entries(doc.paths as Record<string, Record<string, unknown>>)) {
    const full = item.servers ? p : `${base}${p}`;
    for (const method of Object.keys(item).filter((k) => k !== 'servers')) out.add(`${method.toUpperCase()} ${full}`);
  }
  return out;
}

test('every registered route is described in GET /api/v1/openapi.json, and nothing else is', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.get('/api/v1/openapi.json');
  assert.equal(res.status, 200);
  assert.equal(res.body.openapi, '3.1.0');
  const documented = documentedRoutes(res.body);
  const registered = new Set(ts.service.routes.map((r) => `${r.method} ${toOpenApiPath(r.path)}`));
  assert.ok(registered.size > 30, 'the service registers its routes');
  assert.deepEqual([...registered].filter((r) => !documented.has(r)).sort(), [], 'registered but not documented');
  assert.deepEqual([...documented].filter((r) => !registered.has(r)).sort(), [], 'documented but not registered');
});

test('request bodies are described by the schemas that validate them', async (t) => {
  const ts = await startTestService(t);
  const { body: doc } = await ts.http.get('/api/v1/openapi.json');
  const login = doc.paths['/auth/login'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(login.required.sort(), ['identifier_hash', 'password_hash']);
  assert.equal(login.properties.password_hash.pattern, '^[0-9a-fA-F]{64}$');
  const broadcast = doc.paths['/mosques/{id}/broadcasts'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(broadcast.properties.kind.enum, ['azaan', 'jummah', 'waaz', 'announcement']);
  assert.equal(doc.paths['/mosques/{id}/broadcasts'].post['x-minaret-gate'], 'trigger');
  const membership = doc.paths['/memberships/{id}'].patch.requestBody.content['application/json'].schema;
  assert.deepEqual(Object.keys(membership.properties).sort(), ['notify_announcement', 'notify_azaan', 'notify_jummah', 'notify_waaz', 'status']);
});

test('the document is public and the other routes are not', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.get('/api/v1/openapi.json')).status, 200);
  assert.equal((await ts.http.get('/api/v1/me')).status, 401);
});

test('the document passes the OpenAPI 3.1 schema validator with zero errors, and the validator catches a broken one', async (t) => {
  const ts = await startTestService(t);
  const { body: doc } = await ts.http.get('/api/v1/openapi.json');
  const result = await new Validator().validate(structuredClone(doc));
  assert.deepEqual(result.errors ?? [], []);
  assert.equal(result.valid, true);
  const broken = structuredClone(doc);
  broken.paths['/me'].get.responses = { 200: { content: {} } }; // a response without its required description
  assert.equal((await new Validator().validate(broken)).valid, false, 'the validator is not a rubber stamp');
});

test('every operation has a unique operationId, a success schema unless it answers 204, and its error responses', async (t) => {
  const ts = await startTestService(t);
  const { body: doc } = await ts.http.get('/api/v1/openapi.json');
  assert.deepEqual(doc.servers, [{ url: '/api/v1', description: doc.servers[0].description }]);
  assert.deepEqual(doc.components.securitySchemes.bearer, { ...doc.components.securitySchemes.bearer, type: 'http', scheme: 'bearer' });
  assert.deepEqual(doc.security, [{ bearer: [] }]);
  const ids = new Set<string>();
  for (const [p, item] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(item).filter(([k]) => k !== 'servers')) {
      const name = `${method.toUpperCase()} ${p}`;
      assert.match(op.operationId ?? '', /^[a-z][A-Za-z]+$/, `${name} has an operationId`);
      assert.ok(!ids.has(op.operationId), `${op.operationId} is unique`);
      ids.add(op.operationId);
      const [success, ...others] = Object.keys(op.responses).filter((s) => s.startsWith('2'));
      // A second success only where the route declares one (an admin named by email rather than by id: 202).
      const also = ROUTE_DOCS.find((d) => d.operationId === op.operationId)?.alsoSuccess;
      assert.deepEqual(others, also ? [String(also.status)] : [], `${name} has one success status, or the one more it declares`);
      // Bodies are JSON but for the event stream (Server-Sent Events) and the ICS feed: the first media type's schema.
      for (const status of [success!, ...others].filter((s) => s !== '204')) {
        assert.ok((Object.values(op.responses[status].content ?? {})[0] as { schema?: unknown } | undefined)?.schema, `${name} documents its ${status} body`);
      }
      assert.ok(op.responses['500'], `${name} documents 500`);
      const isPublic = Array.isArray(op.security) && op.security.length === 0;
      if (!isPublic) assert.ok(op.responses['401'], `${name} needs a token and documents 401`);
      for (const [status, response] of Object.entries(op.responses as Record<string, any>)) {
        if (status.startsWith('2')) continue;
        const resolved = doc.components.responses[String(response.$ref).split('/').pop()!];
        const codes: string[] = resolved.content['application/json'].schema.properties.error.properties.code.enum;
        assert.ok(codes.length > 0, `${name} ${status} names its error codes`);
      }
    }
  }
  assert.equal(ids.size, documentedRoutes(doc).size);
  for (const p of ['/auth/login', '/auth/signup', '/auth/superadmin-2fa/verify', '/devices/lease-keys', '/openapi.json', '/asyncapi.json']) {
    const op = Object.values(doc.paths[p] as Record<string, any>)[0];
    assert.deepEqual(op.security, [], `${p} needs no token`);
  }
  assert.deepEqual(doc.components.responses.Error401.content['application/json'].schema.properties.error.properties.code.enum.sort(), ['invalid_code', 'invalid_credentials', 'invalid_otp', 'stale_timestamp', 'unauthorized']);
});

test('docs/openapi.json is what the code generates (run npm run docs after changing a route)', () => {
  const committed = fs.readFileSync(path.join(DOCS_DIR, 'openapi.json'), 'utf8');
  assert.equal(committed, generatedDocs()['openapi.json']);
});

test("docs/api.md's error table lists every error code with the status the service answers it with", () => {
  const guide = fs.readFileSync(path.join(DOCS_DIR, 'api.md'), 'utf8');
  const rows = new Map([...guide.matchAll(/^\| (\d{3}) \| `(\w+)` \|/gm)].map((m) => [m[2]!, Number(m[1])]));
  assert.deepEqual(Object.fromEntries([...rows].sort()), Object.fromEntries(Object.entries(httpStatus).sort()));
});

// ---- real answers against the documented schemas ----

/** The documented schema of one response, $refs resolved, with every object closed (no undocumented keys). */
function responseSchema(doc: Doc, method: string, fullPath: string, status: number): Record<string, unknown> {
  const p = fullPath === '/healthz' ? fullPath : fullPath.slice(doc.servers[0].url.length);
  let response = doc.paths[p]?.[method.toLowerCase()]?.responses?.[status];
  assert.ok(response, `${method} ${p} documents ${status}`);
  if (response.$ref) response = doc.components.responses[response.$ref.split('/').pop()];
  return closeObjects(resolveRefs(doc, response.content['application/json'].schema));
}

function resolveRefs(doc: Doc, node: any): any {
  if (Array.isArray(node)) return node.map((n) => resolveRefs(doc, n));
  if (node === null || typeof node !== 'object') return node;
  if (typeof node.$ref === 'string') return resolveRefs(doc, doc.components.schemas[node.$ref.split('/').pop()]);
  return Object.fromEntries(Object.entries(node).map(([k, v]) => [k, resolveRefs(doc, v)]));
}

function closeObjects(node: any): any {
  if (Array.isArray(node)) return node.map(closeObjects);
  if (node === null || typeof node !== 'object') return node;
  const out = Object.fromEntries(Object.entries(node).map(([k, v]) => [k, closeObjects(v)]));
  if (out.properties && out.additionalProperties === undefined) out.additionalProperties = false;
  return out;
}

function checker(doc: Doc) {
  const ajv = createAjv('2020-12');
  const seen = new Set<string>();
  return {
    seen,
    /** Asserts the answer's status and that its body matches what the document says for that status. */
    expect(method: string, fullPath: string, res: HttpResult, status: number, documentedPath = fullPath): any {
      assert.equal(res.status, status, `${method} ${fullPath}: ${JSON.stringify(res.body)}`);
      const validate = ajv.compile(responseSchema(doc, method, documentedPath, status));
      assert.ok(validate(res.body), `${method} ${documentedPath} ${status}: ${ajv.errorsText(validate.errors)} in ${JSON.stringify(res.body)}`);
      seen.add(`${method} ${documentedPath} ${status}`);
      return res.body;
    },
    /** Whether the documented schema accepts a body (to show the check is not a rubber stamp). */
    accepts(method: string, documentedPath: string, status: number, body: unknown) {
      return ajv.compile(responseSchema(doc, method, documentedPath, status))(body);
    },
  };
}

async function get(ts: TestService, p: string, token?: string) {
  return ts.http.get(p, token);
}

test('real answers of representative routes match their documented schemas, with no undocumented keys', async (t) => {
  const ts = await startTestService(t);
  const { body: doc } = await ts.http.get('/api/v1/openapi.json');
  const check = checker(doc);
  const V = '/api/v1';

  check.expect('GET', '/healthz', await get(ts, '/healthz'), 200);
  check.expect('GET', `${V}/devices/lease-keys`, await get(ts, `${V}/devices/lease-keys`), 200);
  check.expect('GET', `${V}/push/vapid-public-key`, await get(ts, `${V}/push/vapid-public-key`), 200);
  const signup = await ts.http.post(`${V}/auth/signup`, { email: 'amina@example.org', password_hash: 'a'.repeat(64) });
  check.expect('POST', `${V}/auth/signup`, signup, 201);
  check.expect('POST', `${V}/auth/login-code`, await ts.http.post(`${V}/auth/login-code`, { identifier_hash: 'b'.repeat(64) }), 202);
  check.expect('POST', `${V}/auth/login`, await ts.http.post(`${V}/auth/login`, { identifier_hash: 'b'.repeat(64), password_hash: 'c'.repeat(64) }), 401);
  check.expect('POST', `${V}/auth/superadmin-forgot`, await ts.http.post(`${V}/auth/superadmin-forgot`, { identifier_hash: 'b'.repeat(64) }), 200);

  const root = await signInSuperadmin(ts);
  const owner = await member(ts, 'owner@example.org');
  const amina = { token: signup.body.access_token as string, id: signup.body.user.id as string, email: 'amina@example.org' };
  await confirmAddress(ts, amina.token, 'email', amina.email);
  const mosque = await createMosque(ts, root.token, owner, { stream_url: 'https://radio.example/noor' });
  const M = `${V}/mosques/${mosque.id}`;
  check.expect('GET', `${V}/mosques`, await get(ts, `${V}/mosques`, owner.token), 200);
  check.expect('GET', M, await get(ts, M, owner.token), 200, `${V}/mosques/{id}`);
  check.expect('GET', `${V}/users`, await get(ts, `${V}/users`, root.token), 200);
  const joined = await joinMosque(ts, amina, mosque.id);
  check.expect('GET', `${M}/memberships`, await get(ts, `${M}/memberships`, owner.token), 200, `${V}/mosques/{id}/memberships`);
  const approved = await ts.http.patch(`${V}/memberships/${joined.id}`, { status: 'approved' }, owner.token);
  check.expect('PATCH', `${V}/memberships/${joined.id}`, approved, 200, `${V}/memberships/{id}`);
  const me = check.expect('GET', `${V}/me`, await get(ts, `${V}/me`, amina.token), 200);
  assert.equal(check.accepts('GET', `${V}/me`, 200, { ...me, user: { ...me.user, password_bcrypt: 'x' } }), false, 'an undocumented key fails');
  assert.equal(check.accepts('GET', `${V}/me`, 200, { ...me, user: { ...me.user, created_at: 1700000000 } }), false, 'epoch seconds where ISO is documented fail');
  check.expect('GET', `${M}/admins`, await get(ts, `${M}/admins`, owner.token), 200, `${V}/mosques/{id}/admins`);
  const invite = await ts.http.post(`${V}/invites`, { mosque_id: mosque.id, email: 'yusuf@example.org', auto_approve: true }, owner.token);
  check.expect('POST', `${V}/invites`, invite, 201);

  const tx = await ts.http.post(`${M}/devices`, { kind: 'transmitter', name: 'minbar' }, owner.token);
  check.expect('POST', `${M}/devices`, tx, 201, `${V}/mosques/{id}/devices`);
  const player = await registerPlayer(ts, amina, mosque.id);
  const client = await connectDevice(t, player.credentials);
  await publish(client, `devices/${player.device.id}/status`, statusPayload('ONLINE', { prev: 'UNBOUND', reason: 'entitled', fw: '1.2.0', mac: 'AA:BB:CC:00:11:22', ssid: 'home', ip: '10.0.0.7', rssi: -61, uptime_s: 42, config_version: 1, detail: { mosque_id: mosque.id } }), { qos: 1, retain: true });
  await publish(client, `devices/${player.device.id}/heartbeat`, heartbeatPayload('ONLINE', { rssi: -60, free_heap: 150000, volume: 70 }));
  await waitForStatus(ts, amina.token, player.device.id, 'ONLINE');
  const D = `${V}/devices/${player.device.id}`;
  check.expect('GET', D, await get(ts, D, amina.token), 200, `${V}/devices/{id}`);
  check.expect('GET', `${V}/devices`, await get(ts, `${V}/devices?mosque_id=${mosque.id}`, owner.token), 200);
  check.expect('GET', `${D}/why`, await get(ts, `${D}/why`, amina.token), 200, `${V}/devices/{id}/why`);
  check.expect('GET', `${D}/events`, await get(ts, `${D}/events`, amina.token), 200, `${V}/devices/{id}/events`);
  // The test's client answers no command: 504. The transmitter is not connected: 409.
  check.expect('POST', `${D}/commands`, await ts.http.post(`${D}/commands`, { name: 'ping', timeout_ms: 300 }, amina.token), 504, `${V}/devices/{id}/commands`);
  const T = `${V}/devices/${tx.body.device.id}`;
  check.expect('POST', `${T}/commands`, await ts.http.post(`${T}/commands`, { name: 'ping' }, owner.token), 409, `${V}/devices/{id}/commands`);
  check.expect('POST', `${T}/credentials`, await ts.http.post(`${T}/credentials`, {}, owner.token), 200, `${V}/devices/{id}/credentials`);
  check.expect('GET', `${D}/logs`, await get(ts, `${D}/logs`, amina.token), 200, `${V}/devices/{id}/logs`);

  const started = await ts.http.post(`${M}/broadcasts`, { kind: 'azaan', prayer: 'maghrib' }, owner.token);
  check.expect('POST', `${M}/broadcasts`, started, 201, `${V}/mosques/{id}/broadcasts`);
  check.expect('POST', `${M}/broadcasts`, await ts.http.post(`${M}/broadcasts`, { kind: 'azaan' }, owner.token), 409, `${V}/mosques/{id}/broadcasts`);
  check.expect('POST', `${M}/broadcasts/x/stop`, await ts.http.post(`${M}/broadcasts/${started.body.id}/stop`, {}, owner.token), 200, `${V}/mosques/{id}/broadcasts/{bid}/stop`);
  check.expect('GET', `${M}/activity`, await get(ts, `${M}/activity`, owner.token), 200, `${V}/mosques/{id}/activity`);

  check.expect('GET', `${V}/me`, await get(ts, `${V}/me`), 401);
  check.expect('GET', M, await get(ts, M, (await member(ts, 'stranger@example.org')).token), 404, `${V}/mosques/{id}`);
  check.expect('POST', `${V}/mosques`, await ts.http.post(`${V}/mosques`, { name: 'x' }, amina.token), 403);
  check.expect('POST', `${V}/mosques`, await ts.http.post(`${V}/mosques`, { name: '' }, root.token), 400);
  check.expect('POST', `${V}/mosques`, await ts.http.request('POST', `${V}/mosques`, { raw: 'name=x', token: root.token, headers: { 'content-type': 'text/plain' } }), 415);
  assert.ok(check.seen.size >= 30, `${check.seen.size} answers checked`);
});

test('a device registration carries the API base URL, from PUBLIC_URL when it is set', async (t) => {
  const plain = await startTestService(t);
  const root = await signInSuperadmin(plain);
  const mosque = await createMosque(plain, root.token, null);
  const tx = await registerTransmitter(plain, root.token, mosque.id);
  assert.equal(tx.credentials.api_url, `${plain.url}/api/v1`);
  const keys = await fetch(`${tx.credentials.api_url}/devices/lease-keys`);
  assert.equal(keys.status, 200, 'the JWKS is found from api_url alone');

  const proxied = await startTestService(t, { env: { PUBLIC_URL: 'https://minaret.example.org/' } });
  const root2 = await signInSuperadmin(proxied);
  const mosque2 = await createMosque(proxied, root2.token, null);
  const creds = (await registerTransmitter(proxied, root2.token, mosque2.id)).credentials;
  assert.equal(creds.api_url, 'https://minaret.example.org/api/v1');
  assert.equal(creds.ws_url, 'wss://minaret.example.org/mqtt');
  assert.equal(creds.mqtt_url, `mqtt://minaret.example.org:${proxied.service.mqttPort}`);
});
