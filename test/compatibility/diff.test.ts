import { test } from 'node:test';
import assert from 'node:assert/strict';
import { asyncApiBreaks, openApiBreaks } from '../../scripts/api-compatibility.ts';

/*
 * The diff behind docs/api.md#versioning-apiv1-only-grows, on small hand-written documents: each change a
 * client would trip on is named exactly, and each addition is named not at all.
 */

type Doc = Record<string, any>;

function openApi(): Doc {
  const json = (schema: Doc) => ({ content: { 'application/json': { schema } } });
  return {
    openapi: '3.1.0', info: { title: 'small', version: '1.0.0' }, servers: [{ url: '/api/v1' }], security: [{ bearer: [] }],
    paths: {
      '/devices/{id}/logs': {
        get: {
          parameters: [
            { name: 'id', in: 'path', required: true, schema: { type: 'string' } },
            { name: 'limit', in: 'query', required: false, schema: { type: 'string', pattern: '^\\d{1,3}$' } },
          ],
          responses: {
            200: { description: 'OK', ...json({ type: 'array', items: { $ref: '#/components/schemas/LogLine' } }) },
            404: { $ref: '#/components/responses/Error404' },
          },
        },
      },
      '/mosques/{id}/broadcasts': {
        post: {
          requestBody: { required: true, ...json({ $ref: '#/components/schemas/NewBroadcast' }) },
          responses: { 201: { description: 'Created', ...json({ type: 'object', properties: { id: { type: 'string' } }, required: ['id'] }) } },
        },
        get: { responses: { 200: { description: 'OK', ...json({ type: 'array', items: { type: 'object', properties: { id: { type: 'string' } } } }) } } },
      },
      '/auth/login': {
        post: {
          security: [],
          requestBody: { required: false, ...json({ type: 'object', properties: { code: { type: 'integer', minimum: 0, maximum: 999999 } } }) },
          responses: { 204: { description: 'Signed in' } },
        },
      },
    },
    components: {
      schemas: {
        LogLine: {
          type: 'object',
          properties: {
            level: { type: 'string', enum: ['error', 'warn', 'info'] },
            msg: { type: 'string' },
            at: { type: 'string' },
            meta: { type: 'object', properties: { source: { type: 'string' } } },
          },
          required: ['level', 'msg', 'at'],
        },
        NewBroadcast: {
          type: 'object',
          properties: {
            kind: { type: 'string', enum: ['azaan', 'waaz'] },
            title: { anyOf: [{ type: 'string', maxLength: 100 }, { type: 'null' }] },
            volume: { type: 'number' },
          },
          required: ['kind'],
          additionalProperties: false,
        },
      },
      responses: { Error404: { description: 'Not found', ...json({ type: 'object', properties: { code: { enum: ['not_found'] } } }) } },
    },
  };
}

const LOGS = 'GET /api/v1/devices/{id}/logs';
const TRIGGER = 'POST /api/v1/mosques/{id}/broadcasts';

/** [what changes, the change, the breaks it must name] */
const OPENAPI_BREAKS: [string, (d: Doc) => void, string[]][] = [
  ['a path disappears', (d) => delete d.paths['/auth/login'], ['/api/v1/auth/login: path removed']],
  ['a method disappears', (d) => delete d.paths['/mosques/{id}/broadcasts'].get, ['GET /api/v1/mosques/{id}/broadcasts: method removed']],
  ['a response field disappears, behind a $ref, inside an array item',
    (d) => delete d.components.schemas.LogLine.properties.msg, [`${LOGS}: response 200 body[].msg: field removed`]],
  ['a nested response field disappears', (d) => delete d.components.schemas.LogLine.properties.meta.properties.source,
    [`${LOGS}: response 200 body[].meta.source: field removed`]],
  ['a response enum loses a value', (d) => d.components.schemas.LogLine.properties.level.enum.pop(),
    [`${LOGS}: response 200 body[].level: enum loses "info"`]],
  ['an error body enum loses a value (clients switch on codes)', (d) => (d.components.responses.Error404.content['application/json'].schema.properties.code.enum = ['gone']),
    [`${LOGS}: response 404 body.code: enum loses "not_found"`]],
  ['a response field that was always there becomes optional', (d) => (d.components.schemas.LogLine.required = ['level', 'msg']),
    [`${LOGS}: response 200 body[].at: was always present, now optional`]],
  ['a list becomes an object (GET /devices/{id}/logs once did)',
    (d) => (d.paths['/devices/{id}/logs'].get.responses[200].content['application/json'].schema = { type: 'object', properties: { lines: { type: 'array' } } }),
    [`${LOGS}: response 200 body: may now be of type object`]],
  ['a response field may now be null', (d) => (d.components.schemas.LogLine.properties.at.type = ['string', 'null']),
    [`${LOGS}: response 200 body[].at: may now be of type null`]],
  ['a success response goes away', (d) => {
    const ok = d.paths['/mosques/{id}/broadcasts'].post.responses;
    ok[200] = ok[201]; delete ok[201];
  }, [`${TRIGGER}: response 201 removed`]],
  ['a request enum loses a value', (d) => d.components.schemas.NewBroadcast.properties.kind.enum.pop(), [`${TRIGGER}: request body.kind: enum loses "waaz"`]],
  ['an optional request field becomes required', (d) => d.components.schemas.NewBroadcast.required.push('title'),
    [`${TRIGGER}: request body.title: was optional, now required`]],
  ['a new required request field appears', (d) => {
    d.components.schemas.NewBroadcast.properties.prayer = { type: 'string' };
    d.components.schemas.NewBroadcast.required.push('prayer');
  }, [`${TRIGGER}: request body.prayer: new required field`]],
  ['a request field narrows from number to integer', (d) => (d.components.schemas.NewBroadcast.properties.volume.type = 'integer'),
    [`${TRIGGER}: request body.volume: no longer accepts type number`]],
  ['a nullable request field stops accepting null', (d) => (d.components.schemas.NewBroadcast.properties.title = { type: 'string', maxLength: 100 }),
    [`${TRIGGER}: request body.title: no longer accepts type null`]],
  ['a request field\'s bound tightens', (d) => (d.components.schemas.NewBroadcast.properties.title.anyOf[0].maxLength = 50),
    [`${TRIGGER}: request body.title: maxLength narrows from 100 to 50`]],
  ['a request field disappears', (d) => delete d.components.schemas.NewBroadcast.properties.volume, [`${TRIGGER}: request body.volume: field removed`]],
  ['an open request body starts refusing unknown fields', (d) => (d.paths['/auth/login'].post.requestBody.content['application/json'].schema.additionalProperties = false),
    ['POST /api/v1/auth/login: request body: now refuses fields it does not list']],
  ['an optional request body becomes required', (d) => (d.paths['/auth/login'].post.requestBody.required = true),
    ['POST /api/v1/auth/login: request body was optional, now required']],
  ['a parameter becomes required', (d) => (d.paths['/devices/{id}/logs'].get.parameters[1].required = true),
    [`${LOGS}: query parameter limit was optional, now required`]],
  ['a new required parameter appears', (d) => d.paths['/devices/{id}/logs'].get.parameters.push({ name: 'since', in: 'query', required: true, schema: { type: 'string' } }),
    [`${LOGS}: new required query parameter since`]],
  ['a parameter\'s pattern changes', (d) => (d.paths['/devices/{id}/logs'].get.parameters[1].schema.pattern = '^\\d{1,2}$'),
    [`${LOGS}: query parameter limit: pattern changes from ^\\d{1,3}$ to ^\\d{1,2}$`]],
  ['a public route starts to need a token', (d) => delete d.paths['/auth/login'].post.security, ['POST /api/v1/auth/login: now needs credentials']],
  ['the base path moves', (d) => (d.servers = [{ url: '/api/v2' }]),
    ['/api/v1/devices/{id}/logs: path removed', '/api/v1/mosques/{id}/broadcasts: path removed', '/api/v1/auth/login: path removed']],
];

for (const [what, change, breaks] of OPENAPI_BREAKS) {
  test(`OpenAPI: ${what} is a break, and named`, () => {
    const now = openApi();
    change(now);
    assert.deepEqual(openApiBreaks(openApi(), now), breaks);
  });
}

test('OpenAPI: additions and widenings break nothing', () => {
  const now = openApi();
  now.paths['/devices/{device_id}/logs'] = now.paths['/devices/{id}/logs']; // renaming a path parameter changes no URL
  delete now.paths['/devices/{id}/logs'];
  now.paths['/devices/{device_id}/logs'].get.parameters[0].name = 'device_id';
  now.paths['/devices/{device_id}/logs'].delete = { responses: { 204: { description: 'Cleared' } } };
  now.paths['/healthz'] = { get: { responses: { 200: { description: 'OK' } } } };
  const line = now.components.schemas.LogLine;
  line.properties.seq = { type: 'integer' };
  line.required.push('seq'); // a new field that is always there: clients that do not know it ignore it
  line.properties.level.enum.push('debug');
  const body = now.components.schemas.NewBroadcast;
  body.properties.kind.enum.push('jummah');
  body.properties.note = { type: 'string' };
  body.properties.title.anyOf[0].maxLength = 200;
  delete body.additionalProperties;
  now.paths['/auth/login'].post.requestBody.content['application/json'].schema.properties.code.type = 'number';
  now.paths['/auth/login'].post.responses[429] = { description: 'Slow down' };
  delete now.paths['/devices/{device_id}/logs'].get.responses[404]; // an error that no longer happens breaks no one
  now.paths['/devices/{device_id}/logs'].get.parameters.push({ name: 'before', in: 'query', required: false, schema: { type: 'string' } });
  assert.deepEqual(openApiBreaks(openApi(), now), []);
});

test('the diff stops at a keyword it does not understand, rather than pass it silently', () => {
  const now = openApi();
  now.components.schemas.NewBroadcast.properties.kind = { allOf: [{ type: 'string' }] };
  assert.throws(() => openApiBreaks(openApi(), now), /keyword allOf is not understood/);
});

test('a schema that contains itself is compared to its end', () => {
  const tree = () => {
    const d = openApi();
    d.components.schemas.LogLine.properties.children = { type: 'array', items: { $ref: '#/components/schemas/LogLine' } };
    return d;
  };
  const now = tree();
  delete now.components.schemas.LogLine.properties.meta;
  assert.deepEqual(openApiBreaks(tree(), now), [`${LOGS}: response 200 body[].meta: field removed`]);
});

function asyncApi(): Doc {
  const message = (payload: Doc) => ({ contentType: 'application/json', payload });
  const v = { const: '1.0' };
  return {
    asyncapi: '3.0.0', info: { title: 'small', version: '1.0.0' },
    channels: {
      status: { address: 'devices/{device_id}/status', messages: { status: { $ref: '#/components/messages/status' } } },
      config: { address: 'devices/{device_id}/config', messages: { config: { $ref: '#/components/messages/config' } } },
      broadcast: { address: 'mosques/{mosque_id}/broadcast', messages: { broadcast: { $ref: '#/components/messages/broadcast' } } },
    },
    operations: {
      sendStatus: { action: 'send', channel: { $ref: '#/channels/status' }, messages: [{ $ref: '#/channels/status/messages/status' }] },
      receiveConfig: { action: 'receive', channel: { $ref: '#/channels/config' }, messages: [{ $ref: '#/channels/config/messages/config' }] },
      receiveBroadcast: { action: 'receive', channel: { $ref: '#/channels/broadcast' } },
      sendBroadcast: { action: 'send', channel: { $ref: '#/channels/broadcast' } },
    },
    components: {
      messages: {
        status: message({ type: 'object', properties: { v, status: { type: 'string', enum: ['ONLINE', 'OFFLINE'] }, fw: { type: 'string' }, ts: { type: 'integer' } }, required: ['v', 'status', 'ts'] }),
        // {"not": {}}: a field that never comes (the generators write it for a field one kind of device lacks)
        config: message({ type: 'object', properties: { v, heartbeat_secs: { type: 'integer' }, volume: { type: 'integer' }, legacy: { not: {} } }, required: ['v', 'heartbeat_secs'] }),
        broadcast: message({ type: 'object', properties: { v, action: { enum: ['start', 'stop'] } }, required: ['v', 'action'] }),
      },
    },
  };
}

const ASYNCAPI_BREAKS: [string, (d: Doc) => void, string[]][] = [
  ['a channel and its operation disappear', (d) => { delete d.channels.config; delete d.operations.receiveConfig; },
    ['channel config (devices/{device_id}/config): removed', 'operation receiveConfig: removed']],
  ['an operation disappears', (d) => delete d.operations.sendStatus, ['operation sendStatus: removed']],
  ['a channel moves', (d) => (d.channels.status.address = 'devices/{device_id}/state'),
    ['channel status: address devices/{device_id}/status is now devices/{device_id}/state']],
  ['a payload the backend sends loses a field', (d) => delete d.components.messages.config.payload.properties.volume,
    ['receive config/messages/config payload.volume: field removed']],
  ['a payload devices send loses an enum value', (d) => d.components.messages.status.payload.properties.status.enum.pop(),
    ['send status/messages/status payload.status: enum loses "OFFLINE"']],
  ['a payload devices send gains a required field', (d) => d.components.messages.status.payload.required.push('fw'),
    ['send status/messages/status payload.fw: was optional, now required']],
  ['a field devices send is refused from now on', (d) => (d.components.messages.status.payload.properties.fw = { not: {} }),
    ['send status/messages/status payload.fw: no longer accepts type string']],
  ['v changes instead of growing', (d) => (d.components.messages.status.payload.properties.v = { const: '2.0' }),
    ['send status/messages/status payload.v: enum loses "1.0"']],
  // The broadcast topic goes both ways: a new required field breaks the transmitters that publish on it.
  ['a payload both sides send gains a required field', (d) => {
    d.components.messages.broadcast.payload.properties.kind = { type: 'string' };
    d.components.messages.broadcast.payload.required.push('kind');
  }, ['send broadcast/messages/broadcast payload.kind: new required field']],
  ['a payload both sides send loses an enum value', (d) => (d.components.messages.broadcast.payload.properties.action.enum = ['start']),
    ['receive broadcast/messages/broadcast payload.action: enum loses "stop"', 'send broadcast/messages/broadcast payload.action: enum loses "stop"']],
];

for (const [what, change, breaks] of ASYNCAPI_BREAKS) {
  test(`AsyncAPI: ${what} is a break, and named`, () => {
    const now = asyncApi();
    change(now);
    assert.deepEqual(asyncApiBreaks(asyncApi(), now), breaks);
  });
}

test('AsyncAPI: additions break nothing: a channel, an optional field devices may send, any field the backend sends, an enum value, a v', () => {
  const now = asyncApi();
  now.channels.log = { address: 'devices/{device_id}/log', messages: {} };
  now.operations.sendLog = { action: 'send', channel: { $ref: '#/channels/log' }, messages: [] };
  const status = now.components.messages.status.payload;
  status.properties.rssi = { type: 'integer' };
  status.properties.status.enum.push('PLAYING');
  status.properties.v = { enum: ['1.0', '2.0'] };
  const config = now.components.messages.config.payload;
  config.properties.quiet_hours = { type: 'object' };
  config.required.push('volume'); // what the backend sends may promise more
  config.properties.legacy = { type: 'string' }; // a field that never came now comes: an addition
  assert.deepEqual(asyncApiBreaks(asyncApi(), now), []);
});
