import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { parsePhoneNumber } from 'libphonenumber-js';
import { normalizeEmail, normalizePhone } from '../../src/platform/identifiers.ts';
import { projectPath } from '../../src/platform/config.ts';

// docs/api.md#identifiers: what is one account, what is another, and what is refused.
const EMAILS_KEPT: Array<[string, string]> = [
  ['  Amina.Khan@Example.COM ', 'amina.khan@example.com'],
  ['ｏａ@example.com', 'oa@example.com'], // fullwidth: NFKC folds it to ASCII
  ['oa@ｅｘａｍｐｌｅ．ｃｏｍ', 'oa@example.com'], // a fullwidth full stop too
  ['оа@example.com', 'оа@example.com'], // all Cyrillic: one script, a different address from oa@
  ['müller@bücher.de', 'müller@bücher.de'],
  ['ALI@مثال.com', 'ali@مثال.com'], // Arabic is not among the look-alike scripts
  ['\u00a0nbsp@example.com\u00a0', 'nbsp@example.com'], // NFKC makes the no-break space a space, then trimmed
];

const EMAILS_REFUSED: Array<[string, RegExp]> = [
  ['oa\u200b@example.com', /zero-width/],
  ['oa\u200c@example.com', /zero-width/],
  ['oa\u200d@example.com', /zero-width/],
  ['o\u2060a@example.com', /zero-width/],
  ['\ufeffoa@example.com', /zero-width/],
  ['o\u00ada@example.com', /zero-width/], // soft hyphen
  ['oa\u200e@example.com', /text-direction/],
  ['oa\u202e@example.com', /text-direction/],
  ['oa\u2067@example.com', /text-direction/],
  ['oa@example.com\n', /control/],
  ['oa\r@example.com', /control/],
  ['o\ta@example.com', /control/],
  ['oa\u007f@example.com', /control/],
  ['oa\u0085@example.com', /control/],
  ['оa@example.com', /mix Latin, Greek, Cyrillic/], // Cyrillic о, Latin a
  ['οa@example.com', /mix Latin, Greek, Cyrillic/], // Greek ο, Latin a
  ['oa@exаmple.com', /mix Latin, Greek, Cyrillic/], // Cyrillic а in the domain
  ['oa@example.com.', /must be an email address/], // an empty label: the same domain as example.com
  ['oa@example..com', /must be an email address/],
  ['oa@example', /must be an email address/],
  ['o a@example.com', /must be an email address/],
  [`${'a'.repeat(65)}@example.com`, /must be an email address/],
  [`${'é'.repeat(33)}@example.com`, /must be an email address/], // 66 octets in UTF-8
];

test('emails: NFKC, trimmed and lower-cased; fullwidth letters are the same address', () => {
  for (const [raw, expected] of EMAILS_KEPT) assert.deepEqual(normalizeEmail(raw), { ok: true, value: expected }, JSON.stringify(raw));
});

test('emails: invisible, control, bidi and mixed-script characters are refused, never stripped', () => {
  for (const [raw, reason] of EMAILS_REFUSED) {
    const result = normalizeEmail(raw);
    assert.equal(result.ok, false, JSON.stringify(raw));
    if (!result.ok) assert.match(result.reason, reason, JSON.stringify(raw));
  }
});

test('an email in its normal form is left as it is (the start-up rewrite relies on it)', () => {
  for (const [, normal] of EMAILS_KEPT) assert.deepEqual(normalizeEmail(normal), { ok: true, value: normal });
});

const PHONES_KEPT: Array<[string, string]> = [
  ['+44 (0)20 7946 0123', '+442079460123'],
  ['+442079460123', '+442079460123'],
  ['+44 20 7946 0123', '+442079460123'],
  ['+４４ ２０ ７９４６ ０１２３', '+442079460123'], // fullwidth digits
  ['+1-202-555-0100', '+12025550100'],
  ['+47 123 45 678', '+4712345678'], // possible (its length), though in no assigned range
  [' +966 50 000 0000 ', '+966500000000'],
];

const PHONES_REFUSED: Array<[string, RegExp]> = [
  ['020 7946 0123', /international form/], // no country code
  ['00442079460123', /international form/],
  ['+44 20 7946 0123 ext. 5', /international form/],
  ['+44207946012a', /international form/],
  ['+44\u200b2079460123', /international form/],
  ['+44 12', /not a possible phone number/],
  ['+0000000000000000000', /not a possible phone number/],
  ['+999 1234567', /not a possible phone number/],
  [`+44${'0'.repeat(40)}`, /international form/],
];

test('phones: E.164 by libphonenumber-js, from international form only', () => {
  for (const [raw, expected] of PHONES_KEPT) assert.deepEqual(normalizePhone(raw), { ok: true, value: expected }, raw);
  for (const [, normal] of PHONES_KEPT) assert.deepEqual(normalizePhone(normal), { ok: true, value: normal });
  for (const [raw, reason] of PHONES_REFUSED) {
    const result = normalizePhone(raw);
    assert.equal(result.ok, false, raw);
    if (!result.ok) assert.match(result.reason, reason, raw);
  }
});

test('the client functions docs/api.md gives compute the same normal form as the server', () => {
  const doc = fs.readFileSync(projectPath('docs/api.md'), 'utf8');
  const section = doc.slice(doc.indexOf('## Identifiers'));
  const email = /const normalizeEmail = (\(email\) => [^;]+);/.exec(section)?.[1];
  assert.ok(email, 'docs/api.md#identifiers gives normalizeEmail');
  assert.match(section, /const normalizePhone = \(phone\) => parsePhoneNumber\(phone\.normalize\('NFKC'\)\)\.number;/);
  const clientEmail = new Function(`return ${email}`)() as (e: string) => string;
  const clientPhone = (phone: string) => parsePhoneNumber(phone.normalize('NFKC')).number;
  for (const [raw, expected] of EMAILS_KEPT) assert.equal(clientEmail(raw), expected, JSON.stringify(raw));
  for (const [raw, expected] of PHONES_KEPT) assert.equal(clientPhone(raw), expected, raw);
});
