import crypto from 'node:crypto';
import net from 'node:net';
import mqtt from 'mqtt';

/**
 * Attack helpers over real sockets (SECURITY.md, "Tested from outside"): raw TCP sockets that send crafted MQTT fixed headers, raw
 * WebSocket frames on /mqtt, and MQTT clients bound to a chosen local address. Shared with bench:hostile.
 * Everything stays on 127.0.0.0/8.
 */

export const CONNECT = 0x10;
export const PUBLISH_QOS0 = 0x30;

/**
 * The MQTT 3.1.1 remaining-length varint ([MQTT-2.2.3]). `maxBytes` cuts a value too large for it short, so a
 * fuzzer can send the malformed 5-byte form on purpose.
 */
export function varint(n: number, maxBytes = Infinity): Buffer {
  const out: number[] = [];
  do {
    let byte = n % 128;
    n = Math.floor(n / 128);
    if (n > 0) byte |= 0x80;
    out.push(byte);
  } while (n > 0 && out.length < maxBytes);
  return Buffer.from(out);
}

/** A fixed header only: the type byte and the announced remaining length. The body is the caller's to send, or not. */
export const fixedHeader = (typeByte: number, remainingLength: number) => Buffer.concat([Buffer.from([typeByte]), varint(remainingLength)]);

const utf8Field = (s: string | Buffer) => {
  const b = Buffer.isBuffer(s) ? s : Buffer.from(s, 'utf8');
  const len = Buffer.alloc(2);
  len.writeUInt16BE(b.length);
  return Buffer.concat([len, b]);
};

/** A whole MQTT 3.1.1 CONNECT (clean session, keepalive 60) with username and password. */
export function connectPacket(clientId: string, username: string, password: string, opts: { clean?: boolean } = {}): Buffer {
  const flags = 0x80 | 0x40 | (opts.clean === false ? 0 : 0x02);
  const variable = Buffer.concat([utf8Field('MQTT'), Buffer.from([4, flags, 0, 60])]);
  const payload = Buffer.concat([utf8Field(clientId), utf8Field(username), utf8Field(password)]);
  return Buffer.concat([fixedHeader(CONNECT, variable.length + payload.length), variable, payload]);
}

export interface RawConnection {
  socket: net.Socket;
  /** Resolves with Date.now() at the moment the server closed (or reset) the connection. */
  closed: Promise<number>;
  isClosed(): boolean;
}

function track(socket: net.Socket): RawConnection {
  let done = false;
  const closed = new Promise<number>((resolve) => {
    socket.once('close', () => {
      done = true;
      resolve(Date.now());
    });
  });
  socket.on('error', () => undefined); // a reset is one way of being closed
  socket.on('data', () => undefined); // read (and discard) whatever the server sends
  return { socket, closed, isClosed: () => done };
}

/** A plain TCP connection to the MQTT port, optionally from another loopback address (127.0.0.2, ...). */
export function rawTcp(port: number, opts: { host?: string; localAddress?: string } = {}): Promise<RawConnection> {
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ port, host: opts.host ?? '127.0.0.1', ...(opts.localAddress && { localAddress: opts.localAddress }) });
    socket.once('connect', () => resolve(track(socket)));
    socket.once('error', reject);
  });
}

/**
 * A WebSocket on `path` upgraded by hand, so frames can be crafted (a header announcing more than is sent).
 * Resolves after the 101; rejects if the server answers otherwise or closes first.
 */
export function rawWebSocket(port: number, opts: { host?: string; path?: string; localAddress?: string } = {}): Promise<RawConnection> {
  const host = opts.host ?? '127.0.0.1';
  return new Promise((resolve, reject) => {
    const socket = net.createConnection({ port, host, ...(opts.localAddress && { localAddress: opts.localAddress }) });
    const key = crypto.randomBytes(16).toString('base64');
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      if (!head.includes('\r\n\r\n')) return;
      socket.off('data', onData);
      if (!head.startsWith('HTTP/1.1 101')) return reject(new Error(`upgrade refused: ${head.split('\r\n')[0]}`));
      resolve(track(socket));
    };
    socket.once('connect', () => {
      socket.write(
        `GET ${opts.path ?? '/mqtt'} HTTP/1.1\r\nHost: ${host}:${port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
          `Sec-WebSocket-Key: ${key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: mqtt\r\n\r\n`,
      );
    });
    socket.on('data', onData);
    socket.once('error', reject);
    socket.once('close', () => reject(new Error('closed before the upgrade')));
  });
}

/** The header of a masked binary WebSocket frame announcing `length` payload bytes (RFC 6455 5.2); no payload. */
export function wsFrameHeader(length: number, mask = Buffer.alloc(4)): Buffer {
  const FIN_BINARY = 0x82;
  if (length < 126) return Buffer.concat([Buffer.from([FIN_BINARY, 0x80 | length]), mask]);
  if (length < 65536) {
    const b = Buffer.from([FIN_BINARY, 0x80 | 126, 0, 0]);
    b.writeUInt16BE(length, 2);
    return Buffer.concat([b, mask]);
  }
  const b = Buffer.alloc(10);
  b[0] = FIN_BINARY;
  b[1] = 0x80 | 127;
  b.writeBigUInt64BE(BigInt(length), 2);
  return Buffer.concat([b, mask]);
}

/** A whole masked binary frame carrying `payload` (an all-zero mask leaves the bytes as they are). */
export const wsFrame = (payload: Buffer) => Buffer.concat([wsFrameHeader(payload.length), payload]);

/** Whether the connection is closed within `ms` (true) or still open then (false). */
export function closedWithin(conn: RawConnection, ms: number): Promise<boolean> {
  return Promise.race([conn.closed.then(() => true), new Promise<boolean>((r) => setTimeout(() => r(conn.isClosed()), ms))]);
}

/** An mqtt.js client whose TCP socket leaves from `localAddress`, to stand for a device at another address. */
export function mqttFrom(localAddress: string, port: number, opts: mqtt.IClientOptions): mqtt.MqttClient {
  return new mqtt.MqttClient(() => net.createConnection({ port, host: '127.0.0.1', localAddress }), {
    reconnectPeriod: 0, connectTimeout: 3000, protocolVersion: 4, keepalive: 60, ...opts,
  });
}

/** Sends `count` bytes of filler in chunks of 64 KiB, stopping early once the socket is closed. */
export async function sendFiller(conn: RawConnection, count: number): Promise<number> {
  const chunk = Buffer.alloc(64 * 1024);
  let sent = 0;
  while (sent < count && !conn.isClosed() && !conn.socket.destroyed) {
    const n = Math.min(chunk.length, count - sent);
    if (!conn.socket.write(chunk.subarray(0, n))) {
      await Promise.race([new Promise((r) => conn.socket.once('drain', r)), conn.closed]);
    }
    sent += n;
  }
  return sent;
}
