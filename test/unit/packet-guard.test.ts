import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createHeaderScanner, scanChunk, type HeaderVerdict } from '../../broker/packet-guard.ts';
import { varint as hostileVarint } from '../support/hostile.ts';

// broker/packet-guard.ts: the fixed-header reader that closes a connection before its packet is buffered.

const bytes = (...b: number[]) => Uint8Array.from(b);
const varint = (n: number) => [...hostileVarint(n)];
const connect = (bodyLength: number) => [0x10, ...varint(bodyLength), ...new Array<number>(bodyLength).fill(0)];


/** Feeds the chunks in order with one limit; the first verdict other than 'ok' ends the scan. */
function scan(chunks: number[][], limit: number): HeaderVerdict {
  const s = createHeaderScanner();
  for (const chunk of chunks) {
    const verdict = scanChunk(s, bytes(...chunk), limit);
    if (verdict !== 'ok') return verdict;
  }
  return 'ok';
}

const table: Array<[string, number[][], number, HeaderVerdict]> = [
  ['a small CONNECT in one chunk', [connect(20)], 100, 'ok'],
  ['a CONNECT exactly at the cap', [connect(100)], 100, 'ok'],
  ['a CONNECT one byte over the cap', [[0x10, ...varint(101)]], 100, 'too_large'],
  ['a CONNECT announcing 256 MB, header only', [[0x10, 0xff, 0xff, 0xff, 0x7f]], 8192, 'too_large'],
  ['a huge length refused on its first continuation byte', [[0x10, 0xff]], 100, 'too_large'],
  ['a length split across chunks', [[0x10, 0x80 | 1], [0x01]], 100, 'too_large'],
  ['a split length that stays under the cap', [[0x10, 0x80 | 10], [0x00], new Array(10).fill(0)], 200, 'ok'],
  ['a type byte alone, then its length later', [[0x10], [5], [1, 2, 3, 4, 5]], 100, 'ok'],
  ['a five-byte varint', [[0x10, 0x80, 0x80, 0x80, 0x80, 0x01]], 1 << 30, 'malformed'],
  ['a four-byte varint at the protocol maximum', [[0x10, 0xff, 0xff, 0xff, 0x7f]], 268_435_455, 'ok'],
  ['a first packet that is a PUBLISH', [[0x30, 0x02, 0x00, 0x00]], 100, 'not_connect'],
  ['a first packet that is a PINGREQ', [[0xc0, 0x00]], 100, 'not_connect'],
  ['CONNECT, then PINGREQ and a small PUBLISH in one chunk', [[...connect(3), 0xc0, 0x00, 0x30, 0x03, 0, 1, 0x61]], 100, 'ok'],
  ['CONNECT, then a PUBLISH over the cap in the same chunk', [[...connect(3), 0x32, ...varint(500)]], 100, 'too_large'],
  ['a body split over many chunks followed by a big header', [[0x10, 4, 0, 0], [0], [0], [0x30, ...varint(1000)]], 100, 'too_large'],
];

for (const [what, chunks, limit, expected] of table) {
  test(`the header scanner answers ${expected} for ${what}`, () => {
    assert.equal(scan(chunks, limit), expected);
  });
}

test('the header scanner applies the limit given with each chunk, so the cap can rise after CONNACK', () => {
  const s = createHeaderScanner();
  assert.equal(scanChunk(s, bytes(...connect(10)), 100), 'ok');
  assert.equal(scanChunk(s, bytes(0x30, ...varint(150)), 100), 'too_large');
  const trusted = createHeaderScanner();
  assert.equal(scanChunk(trusted, bytes(...connect(10)), 100), 'ok');
  assert.equal(scanChunk(trusted, bytes(0x30, ...varint(150), ...new Array(150).fill(0)), 1000), 'ok');
});
