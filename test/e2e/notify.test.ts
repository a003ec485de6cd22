import http from 'node:http';
import net from 'node:net';
import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import bcrypt from 'bcryptjs';
import { SMTPServer } from 'smtp-server';
import { openDatabase } from '../../src/platform/db.ts';
import { createUserStore } from '../../src/people/users.ts';
import { sqliteStore } from '../../src/platform/store/store.ts';
import { systemClock } from '../../src/platform/clock.ts';
import { hmacHex, sha256, signupMember, startTestService, type TestService } from '../support/service.ts';

// End to end through the real transports (docs/settings.md, `NOTIFY_WEBHOOK_URL`): a webhook peer and an SMTP peer on loopback.

interface Hook {
  url: string;
  /** Every JSON body the hook received, failed answers included, in arrival order. */
  bodies: unknown[];
}

/** A local webhook receiver; `answer(n)` gives the status for the n-th request (1-based). */
async function startHook(t: TestContext, answer: (n: number) => number = () => 200): Promise<Hook> {
  const bodies: unknown[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const text = Buffer.concat(chunks).toString('utf8');
      bodies.push(req.method === 'POST' && req.headers['content-type']?.startsWith('application/json') ? JSON.parse(text) : { bad: text });
      res.statusCode = answer(bodies.length);
      res.end();
    });
  });
  const port = await listenOnLoopback(server);
  t.after(() => closeServer(server));
  return { url: `http://127.0.0.1:${port}/hook`, bodies };
}

function listenOnLoopback(server: net.Server): Promise<number> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.address() as net.AddressInfo).port));
  });
}

function closeServer(server: http.Server): Promise<void> {
  return new Promise((resolve) => {
    server.close(() => resolve());
    server.closeAllConnections();
  });
}

/** A port nobody listens on: bind one, then let it go. */
async function freePort(): Promise<number> {
  const server = net.createServer();
  const port = await listenOnLoopback(server);
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

async function webhookService(t: TestContext, url: string): Promise<TestService> {
  return startTestService(t, { env: { NOTIFY_TRANSPORT: 'webhook', NOTIFY_WEBHOOK_URL: url }, useConfiguredTransport: true });
}

const loginCodeRe = /^\d{6}$/;

test('webhook: a login code arrives as the documented JSON and signs the member in', async (t) => {
  const hook = await startHook(t);
  const ts = await webhookService(t, hook.url);
  const member = await signupMember(ts.http, 'Hook.Member@Example.com');
  assert.equal(member.user.email, 'hook.member@example.com');

  const asked = await ts.http.post('/api/v1/auth/login-code', { identifier_hash: sha256('hook.member@example.com') });
  assert.equal(asked.status, 202);
  assert.deepEqual(asked.body, { status: 'accepted' });
  await ts.service.notifier.idle();

  assert.equal(ts.messages.length, 0, 'the configured transport is used, not the recording one');
  assert.equal(hook.bodies.length, 1);
  const body = hook.bodies[0] as Record<string, unknown>;
  assert.deepEqual(Object.keys(body).sort(), ['channel', 'code', 'link', 'purpose', 'text', 'to']);
  assert.equal(body.channel, 'email');
  assert.equal(body.to, 'hook.member@example.com');
  assert.equal(body.purpose, 'login_code');
  assert.match(String(body.code), loginCodeRe);
  assert.equal(typeof body.text, 'string');
  assert.ok(String(body.text).includes(String(body.code)), 'the text carries the code');

  const verified = await ts.http.post('/api/v1/auth/login-code/verify', { identifier_hash: sha256('hook.member@example.com'), code: body.code });
  assert.equal(verified.status, 200);
  assert.equal(verified.body.user.id, member.user.id);
  const me = await ts.http.get('/api/v1/me', verified.body.access_token);
  assert.equal(me.status, 200);
});

test('webhook: two 500 answers are retried with backoff and the message still arrives; the answer was 202', async (t) => {
  const hook = await startHook(t, (n) => (n <= 2 ? 500 : 200));
  const ts = await webhookService(t, hook.url);
  await signupMember(ts.http, 'retry@example.com');

  const asked = await ts.http.post('/api/v1/auth/login-code', { identifier_hash: sha256('retry@example.com') });
  assert.equal(asked.status, 202);
  assert.deepEqual(asked.body, { status: 'accepted' });
  await ts.service.notifier.idle();

  assert.equal(hook.bodies.length, 3, 'two failed attempts and one that worked');
  assert.deepEqual(hook.bodies[1], hook.bodies[0], 'a retry sends the same message');
  assert.deepEqual(hook.bodies[2], hook.bodies[0]);
  const code = (hook.bodies[2] as { code: string }).code;
  assert.match(code, loginCodeRe);

  const retries = ts.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'message not delivered; will retry');
  assert.deepEqual(retries.map((l) => l.attempt), [1, 2]);
  assert.ok(retries.every((l) => l.transport === 'webhook' && /500/.test(l.err)));
  assert.ok(!ts.logs.some((l) => l.includes('giving up')));

  const verified = await ts.http.post('/api/v1/auth/login-code/verify', { identifier_hash: sha256('retry@example.com'), code });
  assert.equal(verified.status, 200);
});

test('webhook: a peer that is down entirely does not change the 202; the notifier gives up after its attempts', async (t) => {
  const port = await freePort();
  const ts = await webhookService(t, `http://127.0.0.1:${port}/hook`);
  await signupMember(ts.http, 'down@example.com');

  const asked = await ts.http.post('/api/v1/auth/login-code', { identifier_hash: sha256('down@example.com') });
  assert.equal(asked.status, 202);
  assert.deepEqual(asked.body, { status: 'accepted' });
  const forgot = await ts.http.post('/api/v1/auth/forgot-password', { identifier_hash: sha256('down@example.com') });
  assert.equal(forgot.status, 202);
  assert.deepEqual(forgot.body, { status: 'accepted' });
  await ts.service.notifier.idle();

  const gaveUp = ts.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'message not delivered; giving up');
  assert.deepEqual(gaveUp.map((l) => l.purpose).sort(), ['login_code', 'password_reset']);
  assert.ok(gaveUp.every((l) => l.attempt === 5 && l.transport === 'webhook'));
});

interface ReceivedMail {
  from: string;
  to: string[];
  raw: string;
}

async function startSmtp(t: TestContext): Promise<{ port: number; mails: ReceivedMail[] }> {
  const mails: ReceivedMail[] = [];
  const server = new SMTPServer({
    secure: false,
    authOptional: true,
    disabledCommands: ['STARTTLS', 'AUTH'],
    logger: false,
    onData(stream, session, callback) {
      const chunks: Buffer[] = [];
      stream.on('data', (c: Buffer) => chunks.push(c));
      stream.on('end', () => {
        const envelope = session.envelope;
        mails.push({
          from: envelope.mailFrom ? envelope.mailFrom.address : '',
          to: envelope.rcptTo.map((r) => r.address),
          raw: Buffer.concat(chunks).toString('utf8'),
        });
        callback();
      });
    },
  });
  const port = await new Promise<number>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve((server.server.address() as net.AddressInfo).port));
  });
  t.after(() => new Promise<void>((resolve) => server.close(() => resolve())));
  return { port, mails };
}

/** The decoded text body of a single-part mail (7bit, quoted-printable or base64). */
function mailText(raw: string): { headers: string; text: string } {
  const split = raw.indexOf('\r\n\r\n');
  const headers = raw.slice(0, split);
  const body = raw.slice(split + 4);
  const encoding = /^content-transfer-encoding:\s*(\S+)/im.exec(headers)?.[1]?.toLowerCase() ?? '7bit';
  if (encoding === 'base64') return { headers, text: Buffer.from(body.replace(/\s+/g, ''), 'base64').toString('utf8') };
  if (encoding === 'quoted-printable') {
    const text = body.replace(/=\r?\n/g, '').replace(/=([0-9A-F]{2})/gi, (_m, hex: string) => String.fromCharCode(parseInt(hex, 16)));
    return { headers, text };
  }
  return { headers, text: body };
}

test('smtp: a password reset is mailed from SMTP_FROM to the member and the token works', async (t) => {
  const smtp = await startSmtp(t);
  const ts = await startTestService(t, {
    env: { NOTIFY_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${smtp.port}`, SMTP_FROM: 'minaret@example.com' },
    useConfiguredTransport: true,
  });
  const member = await signupMember(ts.http, 'mail.member@example.com', 'old password 1');

  const asked = await ts.http.post('/api/v1/auth/forgot-password', { identifier_hash: sha256('mail.member@example.com') });
  assert.equal(asked.status, 202);
  await ts.service.notifier.idle();

  assert.equal(smtp.mails.length, 1);
  const mail = smtp.mails[0]!;
  assert.equal(mail.from, 'minaret@example.com');
  assert.deepEqual(mail.to, ['mail.member@example.com']);
  const { headers, text } = mailText(mail.raw);
  assert.match(headers, /^From: minaret@example\.com/im);
  assert.match(headers, /^To: mail\.member@example\.com/im);
  assert.match(headers, /^Subject: Reset your Minaret password/im);
  const token = /password within \d+ hours: ([A-Za-z0-9_-]{16,})/.exec(text)?.[1];
  assert.ok(token, `a reset token in the text: ${text}`);

  const reset = await ts.http.post('/api/v1/auth/reset-password', { token, password_hash: sha256('new password 2') });
  assert.equal(reset.status, 200);
  assert.deepEqual(reset.body, { status: 'password_reset' });
  assert.equal((await ts.http.get('/api/v1/me', member.access_token)).status, 401, 'older tokens stop working');
  const login = await ts.http.post('/api/v1/auth/login', { identifier_hash: sha256('mail.member@example.com'), password_hash: sha256('new password 2') });
  assert.equal(login.status, 200);
  const again = await ts.http.post('/api/v1/auth/reset-password', { token, password_hash: sha256('third password 3') });
  assert.equal(again.status, 400);
  assert.equal(again.body.error.code, 'invalid_token');
});

test('secrets never reach the log across a full auth flow (webhook transport, debug level)', async (t) => {
  const hook = await startHook(t);
  const ts = await webhookService(t, hook.url);
  const secrets: string[] = [];
  const codes: string[] = [];
  const lastHook = () => hook.bodies[hook.bodies.length - 1] as { code?: string; token?: string; purpose: string };
  const keep = (value: unknown) => {
    assert.equal(typeof value, 'string');
    assert.ok((value as string).length > 0);
    secrets.push(value as string);
    return value as string;
  };

  // Member: signup with a password, login, login code, forgot and reset.
  const email = 'secret.keeper@example.com';
  const idHash = sha256(email);
  const password = 'a long member password';
  keep(password);
  keep(sha256(password));
  const signup = await ts.http.post('/api/v1/auth/signup', { email, password_hash: sha256(password) });
  assert.equal(signup.status, 201);
  keep(signup.body.access_token);
  const login = await ts.http.post('/api/v1/auth/login', { identifier_hash: idHash, password_hash: sha256(password) });
  assert.equal(login.status, 200);
  keep(login.body.access_token);

  assert.equal((await ts.http.post('/api/v1/auth/login-code', { identifier_hash: idHash })).status, 202);
  await ts.service.notifier.idle();
  assert.equal(lastHook().purpose, 'login_code');
  const code = lastHook().code!;
  codes.push(code);
  const viaCode = await ts.http.post('/api/v1/auth/login-code/verify', { identifier_hash: idHash, code });
  assert.equal(viaCode.status, 200);
  keep(viaCode.body.access_token);

  assert.equal((await ts.http.post('/api/v1/auth/forgot-password', { identifier_hash: idHash })).status, 202);
  await ts.service.notifier.idle();
  assert.equal(lastHook().purpose, 'password_reset');
  const resetToken = keep(lastHook().token);
  const newPassword = 'another long member password';
  keep(newPassword);
  keep(sha256(newPassword));
  const reset = await ts.http.post('/api/v1/auth/reset-password', { token: resetToken, password_hash: sha256(newPassword) });
  assert.equal(reset.status, 200);

  // Superadmin: created straight in the database file the service uses, then the two-step login.
  const rootEmail = 'root.secret@example.com';
  const rootPassword = 'the superadmin password';
  keep(rootPassword);
  keep(sha256(rootPassword));
  const db = openDatabase(ts.config.databasePath);
  try {
    await (await createUserStore(sqliteStore(db), systemClock)).create({
      email: rootEmail,
      emailHash: sha256(rootEmail),
      phone: null,
      phoneHash: null,
      passwordBcrypt: bcrypt.hashSync(sha256(rootPassword), 4),
      role: 'superadmin',
    });
  } finally {
    db.close();
  }
  const step1 = await ts.http.post('/api/v1/auth/superadmin-2fa', { identifier_hash: sha256(rootEmail), password_hash: sha256(rootPassword) });
  assert.equal(step1.status, 200);
  const sessionToken = keep(step1.body.session_token);
  await ts.service.notifier.idle();
  assert.equal(lastHook().purpose, 'superadmin_otp');
  const otp = lastHook().code!;
  codes.push(otp);
  const timestamp = Math.floor(Date.now() / 1000);
  const hmac = keep(hmacHex(sessionToken, `${otp}|${timestamp}`));
  const step2 = await ts.http.post('/api/v1/auth/superadmin-2fa/verify', { session_token: sessionToken, timestamp, hmac });
  assert.equal(step2.status, 200);
  assert.equal(step2.body.user.role, 'superadmin');
  keep(step2.body.access_token);
  assert.equal((await ts.http.get('/api/v1/me', step2.body.access_token)).status, 200);

  // A couple of failures too: those paths log as well.
  assert.equal((await ts.http.post('/api/v1/auth/login', { identifier_hash: idHash, password_hash: sha256(password) })).status, 401);
  assert.equal((await ts.http.post('/api/v1/auth/login-code/verify', { identifier_hash: idHash, code })).status, 401);

  await ts.service.notifier.idle();
  assert.ok(ts.logs.length > 10, 'the log was captured');
  assert.ok(ts.logs.some((l) => l.includes('"level":20')), 'debug lines were captured');
  assert.equal(hook.bodies.length, 3);
  for (const line of ts.logs) {
    for (const secret of secrets) assert.ok(!line.includes(secret), `a secret (${secret.slice(0, 6)}...) leaked into: ${line}`);
    // Six digits can occur by chance inside a timestamp; a code counts only as a number on its own.
    for (const c of codes) assert.doesNotMatch(line, new RegExp(`(?<!\\d)${c}(?!\\d)`), `a code leaked into: ${line}`);
  }
});

/** Polls until `ready()` holds (a peer saw the attempt), failing after `ms`. */
async function until(ready: () => boolean, ms = 5000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ready()) {
    if (Date.now() > deadline) throw new Error('timed out waiting');
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/** Stops the service and asserts a hanging attempt did not hold the stop; returns the giving-up log lines. */
async function closeQuickly(ts: TestService): Promise<Array<Record<string, any>>> {
  const started = Date.now();
  await ts.service.close();
  const took = Date.now() - started;
  assert.ok(took < 5000, `the stop took ${took} ms`);
  return ts.logs.map((l) => JSON.parse(l)).filter((l) => l.msg === 'message not delivered; giving up');
}

test('webhook: a peer that accepts and never answers does not hold the 202 or the stop', async (t) => {
  let seen = 0;
  const hung = http.createServer(() => void seen++);
  const port = await listenOnLoopback(hung);
  t.after(() => closeServer(hung));
  const ts = await webhookService(t, `http://127.0.0.1:${port}/hook`);
  await signupMember(ts.http, 'hung@example.com');

  const asked = await ts.http.post('/api/v1/auth/login-code', { identifier_hash: sha256('hung@example.com') });
  assert.equal(asked.status, 202);
  await until(() => seen === 1);
  const gaveUp = await closeQuickly(ts);
  assert.equal(gaveUp.length, 1);
  assert.equal(gaveUp[0]!.purpose, 'login_code');
  assert.equal(gaveUp[0]!.transport, 'webhook');
});

test('smtp: a server that accepts and never greets does not hold the stop', async (t) => {
  const sockets = new Set<net.Socket>();
  const silent = net.createServer((socket) => void sockets.add(socket));
  const port = await listenOnLoopback(silent);
  t.after(
    () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        silent.close(() => resolve());
      }),
  );
  const ts = await startTestService(t, {
    env: { NOTIFY_TRANSPORT: 'smtp', SMTP_URL: `smtp://127.0.0.1:${port}`, SMTP_FROM: 'minaret@example.com' },
    useConfiguredTransport: true,
  });
  await signupMember(ts.http, 'silent@example.com');

  const asked = await ts.http.post('/api/v1/auth/forgot-password', { identifier_hash: sha256('silent@example.com') });
  assert.equal(asked.status, 202);
  await until(() => sockets.size === 1);
  const gaveUp = await closeQuickly(ts);
  assert.equal(gaveUp.length, 1);
  assert.equal(gaveUp[0]!.purpose, 'password_reset');
  assert.equal(gaveUp[0]!.transport, 'smtp');
});

test('a message the transport can never carry is dropped at once, not retried', async () => {
  const { createNotifier, UndeliverableError } = await import('../../src/platform/notify.ts');
  const lines: Array<{ msg: string }> = [];
  const logger = { debug() {}, info() {}, warn: (o: object, msg?: string) => void lines.push({ msg: msg ?? '' }), error: (o: object, msg?: string) => void lines.push({ msg: msg ?? '' }), child() { return logger; } };
  let attempts = 0;
  const notifier = createNotifier({ name: 'email-only', deliver: async () => { attempts++; throw new UndeliverableError('no sms'); } }, { logger, baseDelayMs: 5 });
  notifier.send({ channel: 'sms', to: '+4712345678', purpose: 'login_code', text: 'x', link: 'http://minaret.test/signin' });
  await notifier.idle();
  await notifier.close();
  assert.equal(attempts, 1);
  assert.ok(lines.some((l) => l.msg.includes('cannot be delivered')));
});

// `console` prints the same object a webhook receives, as one JSON log line.
test('the console transport prints the outgoing message as one JSON log line with the webhook keys', async (t) => {
  const ts = await startTestService(t, { env: { NOTIFY_TRANSPORT: 'console' }, useConfiguredTransport: true });
  await signupMember(ts.http, 'console@example.com');
  assert.equal((await ts.http.post('/api/v1/auth/login-code', { identifier_hash: sha256('console@example.com') })).status, 202);
  await ts.service.notifier.idle();
  // (The notifier's own debug line names the purpose too, but carries no message.)
  const lines = ts.logs.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.purpose === 'login_code' && 'text' in l);
  assert.equal(lines.length, 1);
  const line = lines[0]!;
  assert.equal(line.channel, 'email');
  assert.equal(line.to, 'console@example.com');
  assert.match(String(line.code), /^\d{6}$/);
  assert.ok(String(line.text).includes(String(line.code)));
  const verify = await ts.http.post('/api/v1/auth/login-code/verify', { identifier_hash: sha256('console@example.com'), code: line.code });
  assert.equal(verify.status, 200);
});
