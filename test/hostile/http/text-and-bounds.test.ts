import { test } from 'node:test';
import assert from 'node:assert/strict';
import { startTestService } from '../../support/service.ts';
import { assertError } from '../../support/api.ts';
import { API, createMosque, member, signInSuperadmin } from '../../support/people.ts';

/** docs/api.md, "Base URL and conventions": what free text, paging parameters and the bearer scheme accept. */

const UNSAFE_IN_NAMES = ['\n', '\r', '\t', '\u0000', '\u001b[31m', '\u007f', '\u0085', '\u2028', '\u202a', '\u202e', '\u2066', '\u2069'];

test('names, titles and URLs with control or bidi-override characters are refused with 400; joiners are kept', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  for (const bad of UNSAFE_IN_NAMES) {
    const label = JSON.stringify(bad);
    const created = assertError(await ts.http.post(`${API}/mosques`, { name: `Masjid${bad}Noor` }, root.token), 400, 'validation_failed');
    assert.equal(created.error.details[0].path, 'name', label);
    assert.match(created.error.details[0].message, /control or text-direction/, label);
    assertError(await ts.http.patch(`${API}/mosques/${mosque.id}`, { name: `Noor${bad}` }, root.token), 400, 'validation_failed');
    assertError(await ts.http.post(`${API}/mosques/${mosque.id}/devices`, { kind: 'transmitter', name: `mic${bad}` }, root.token), 400, 'validation_failed');
    assertError(await ts.http.post(`${API}/mosques/${mosque.id}/broadcasts`, { kind: 'announcement', title: `Eid${bad}` }, root.token), 400, 'validation_failed');
    assertError(await ts.http.patch(`${API}/mosques/${mosque.id}`, { stream_url: `https://radio.example/live${bad}` }, root.token), 400, 'validation_failed');
  }
  assert.equal((await ts.http.get(`${API}/mosques/${mosque.id}`, root.token)).body.name, 'Masjid Al-Noor');
  // Persian and Urdu names need the zero-width non-joiner; a direction mark is harmless text.
  const persian = await ts.http.post(`${API}/mosques`, { name: 'مسجد می\u200cخواهم \u200fنور' }, root.token);
  assert.equal(persian.status, 201, JSON.stringify(persian.body));
  assert.equal(persian.body.name, 'مسجد می\u200cخواهم \u200fنور');
});

test('offset, limit and before are bounded: a number past their range or past 2^53 is a 400, never a 500', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const mosque = await createMosque(ts, root.token, null);
  const device = await ts.http.post(`${API}/mosques/${mosque.id}/devices`, { kind: 'transmitter' }, root.token);
  const refused = [
    '/users?offset=9223372036854775808', '/users?offset=1000001', '/users?offset=-1', '/users?offset=1e3', '/users?limit=99999999999999999999',
    `/mosques/${mosque.id}/activity?before=9223372036854775808`, `/mosques/${mosque.id}/activity?before=9007199254740992`,
    `/devices/${device.body.device.id}/events?before=18446744073709551616`, `/mosques/${mosque.id}/broadcasts?limit=0`,
    `/devices/${device.body.device.id}/logs?limit=501`,
  ];
  for (const path of refused) {
    const body = assertError(await ts.http.get(`${API}${path}`, root.token), 400, 'validation_failed');
    assert.ok(body.error.details.length > 0, path);
  }
  for (const path of ['/users?offset=1000000', `/mosques/${mosque.id}/activity?before=9007199254740991`, `/devices/${device.body.device.id}/events?before=9007199254740991`]) {
    const res = await ts.http.get(`${API}${path}`, root.token);
    assert.equal(res.status, 200, path);
    assert.ok(Array.isArray(res.body), path);
  }
  assert.deepEqual((await ts.http.get(`${API}/users?offset=1000000`, root.token)).body, []);
});

test('the bearer scheme is matched in any case (RFC 9110 §11.1), for the API and for the event stream ticket', async (t) => {
  const ts = await startTestService(t, { logLevel: 'warn' });
  const root = await signInSuperadmin(ts);
  const person = await member(ts, 'case@example.com');
  for (const scheme of ['bearer', 'BEARER', 'BeArEr', 'Bearer  ']) {
    const res = await ts.http.request('GET', `${API}/me`, { headers: { authorization: `${scheme} ${person.token}` } });
    assert.equal(res.status, 200, scheme);
    assert.equal(res.body.user.id, person.id);
  }
  for (const malformed of [`Bearer${person.token}`, `Bearer\t${person.token}`, `bearer: ${person.token}`]) {
    assertError(await ts.http.request('GET', `${API}/me`, { headers: { authorization: malformed } }), 401, 'unauthorized');
  }
  // The ticket keeps the token it was issued under, read from the same header, whatever its case.
  const mosque = await createMosque(ts, root.token, null);
  const ticket = await ts.http.request('POST', `${API}/mosques/${mosque.id}/events/ticket`, { headers: { authorization: `bearer   ${root.token}` } });
  assert.equal(ticket.status, 201);
  const controller = new AbortController();
  const stream = await fetch(`${ts.url}${API}/mosques/${mosque.id}/events/stream?ticket=${encodeURIComponent(ticket.body.ticket)}`, { signal: controller.signal });
  assert.equal(stream.status, 200);
  controller.abort();
});
