import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createByteCache } from '../../../src/platform/memory/byte-cache.ts';

// src/platform/memory/byte-cache.ts: the one bounded cache of whole files behind firmware and recording downloads.
const bytes = (n: number, fill = 1) => Buffer.alloc(n, fill);

test('stored files are answered until the bound needs their room, the least recently stored going first', () => {
  const cache = createByteCache(100);
  cache.remember('a', bytes(40, 1));
  cache.remember('b', bytes(40, 2));
  assert.equal(cache.get('a')?.[0], 1);
  assert.equal(cache.heldBytes(), 80);
  cache.remember('c', bytes(30, 3));
  assert.equal(cache.get('a'), undefined, 'a, the oldest, made room');
  assert.equal(cache.get('b')?.[0], 2);
  assert.equal(cache.get('c')?.[0], 3);
  assert.equal(cache.heldBytes(), 70);
});

test('a file larger than the bound is never held, and drops nothing', () => {
  const cache = createByteCache(100);
  cache.remember('a', bytes(60));
  cache.remember('huge', bytes(101));
  assert.equal(cache.get('huge'), undefined);
  assert.ok(cache.get('a'));
  assert.equal(cache.heldBytes(), 60);
});

test('storing a key again replaces its bytes and counts them once; a dropped key frees its bytes', () => {
  const cache = createByteCache(100);
  cache.remember('a', bytes(60, 1));
  cache.remember('a', bytes(70, 2));
  assert.equal(cache.get('a')?.length, 70);
  assert.equal(cache.heldBytes(), 70);
  cache.drop('a');
  cache.drop('never stored');
  assert.equal(cache.get('a'), undefined);
  assert.equal(cache.heldBytes(), 0);
});

test('the bytes held never exceed the bound, whatever is stored', () => {
  const cache = createByteCache(1000);
  for (let i = 0; i < 500; i++) {
    cache.remember(`k${i % 37}`, bytes((i * 7919) % 400 + 1));
    assert.ok(cache.heldBytes() <= 1000, `after ${i + 1} stores: ${cache.heldBytes()}`);
  }
});
