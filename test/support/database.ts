import assert from 'node:assert/strict';
import { openDatabase } from '../../src/platform/db.ts';
import { assertError } from './api.ts';
import { API } from './people.ts';
import type { TestService } from './service.ts';

/** Helpers of the tests that fill a real database file up to DATABASE_MAX_BYTES (not a test file itself). */

/** The database file's size now (a closed database has no WAL left: the file is all of it). */
export function databaseSize(file: string): number {
  const db = openDatabase(file);
  try {
    return (db.pragma('page_count', { simple: true }) as number) * (db.pragma('page_size', { simple: true }) as number);
  } finally {
    db.close();
  }
}

/**
 * Signs up throw-away accounts (`filler-*` emails) until the database refuses `streak` in a row (b-tree pages
 * keep some slack after splits, so a write may still fit after the first refusal). Every refusal must be
 * 503 storage_unavailable. Returns the index of the last request.
 */
export async function fillUntilRefused(http: TestService['http'], streak = 8): Promise<number> {
  let refusedInARow = 0;
  for (let i = 0; i < 5000; i++) {
    const res = await http.post(`${API}/auth/signup`, { email: `filler-${i}-${'x'.repeat(40)}@example.com` });
    if (res.status === 201) {
      refusedInARow = 0;
      continue;
    }
    assertError(res, 503, 'storage_unavailable');
    if (++refusedInARow === streak) return i;
  }
  assert.fail('the database never filled up');
}

/** A device's lease and config version as its row holds them, read from the file (the service may be stopped). */
export function storedLease(dbPath: string, id: string) {
  const db = openDatabase(dbPath);
  try {
    return db.prepare<[string], { lease_token: string | null; lease_expires_at: number | null; config_version: number }>('SELECT lease_token, lease_expires_at, config_version FROM devices WHERE id = ?').get(id)!;
  } finally {
    db.close();
  }
}
