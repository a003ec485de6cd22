import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestService } from '../support/service.ts';

const toOpenApiPath = (p: string) => p.replace(/:(\w+)/g, '{$1}');

test('every registered route is described in GET /api/v1/openapi.json, and nothing else is', async (t) => {
  const ts = await startTestService(t);
  const res = await ts.http.get('/api/v1/openapi.json');
  assert.equal(res.status, 200);
  assert.equal(res.body.openapi, '3.1.0');
  const documented = new Set<string>();
  for (const [path, ops] of Object.entries(res.body.paths as Record<string, Record<string, unknown>>)) {
    for (const method of Object.keys(ops)) documented.add(`${method.toUpperCase()} ${path}`);
  }
  const registered = new Set(ts.service.routes.map((r) => `${r.method} ${toOpenApiPath(r.path)}`));
  assert.ok(registered.size > 30, 'the service registers its routes');
  assert.deepEqual([...registered].filter((r) => !documented.has(r)).sort(), [], 'registered but not documented');
  assert.deepEqual([...documented].filter((r) => !registered.has(r)).sort(), [], 'documented but not registered');
});

test('request bodies are described by the schemas that validate them', async (t) => {
  const ts = await startTestService(t);
  const { body: doc } = await ts.http.get('/api/v1/openapi.json');
  const login = doc.paths['/api/v1/auth/login'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(login.required.sort(), ['identifier_hash', 'password_hash']);
  assert.equal(login.properties.password_hash.pattern, '^[0-9a-fA-F]{64}$');
  const broadcast = doc.paths['/api/v1/mosques/{id}/broadcasts'].post.requestBody.content['application/json'].schema;
  assert.deepEqual(broadcast.properties.kind.enum, ['azaan', 'jummah', 'waaz', 'announcement']);
  assert.equal(doc.paths['/api/v1/mosques/{id}/broadcasts'].post['x-minaret-gate'], 'trigger');
  const membership = doc.paths['/api/v1/memberships/{id}'].patch.requestBody.content['application/json'].schema;
  assert.deepEqual(Object.keys(membership.properties).sort(), ['notify_announcement', 'notify_azaan', 'notify_jummah', 'notify_waaz', 'status']);
});

test('the document is public and the other routes are not', async (t) => {
  const ts = await startTestService(t);
  assert.equal((await ts.http.get('/api/v1/openapi.json')).status, 200);
  assert.equal((await ts.http.get('/api/v1/me')).status, 401);
});
