import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { PrayerTimesSettings } from '../../src/mosques/mosques.ts';
import { parametersFor, startsOn } from '../../src/schedule/prayer-times.ts';
import { slotsOn, type MosqueTimes } from '../../src/schedule/slots.ts';
import { localHhMm, parseDate } from '../../src/schedule/zone.ts';

/** Published timetables, within 2 minutes; each row names its publisher and the parameters it states. */
interface Published {
  city: string;
  source: string;
  latitude: number;
  longitude: number;
  timezone: string;
  settings: PrayerTimesSettings;
  date: string;
  times: { fajr: string; dhuhr: string; asr: string; maghrib: string; isha: string };
}

const PUBLISHED: Published[] = [
  {
    // Europe, above 55°N. moonsighting.com (pray.php), Moonsighting Committee, Hanafi Asr; the values as
    // adhan-js's high-latitude test quotes them (batoulapps/adhan-js test/adhan.test.ts).
    city: 'Oslo', source: 'moonsighting.com', latitude: 59.9094, longitude: 10.7349, timezone: 'Europe/Oslo',
    settings: { method: 'moonsighting_committee', madhab: 'hanafi' }, date: '2016-01-01',
    times: { fajr: '07:34', dhuhr: '12:25', asr: '13:36', maghrib: '15:25', isha: '17:02' },
  },
  {
    // Europe, first month under British Summer Time: moonsighting.com for London, Hanafi Asr (adhan-js
    // Shared/Times/London-MoonsightingCommittee.json, "Apr 01 (Fri)").
    city: 'London', source: 'moonsighting.com', latitude: 51.507194, longitude: -0.116711, timezone: 'Europe/London',
    settings: { method: 'moonsighting_committee', madhab: 'hanafi' }, date: '2016-04-01',
    times: { fajr: '04:59', dhuhr: '13:09', asr: '17:31', maghrib: '19:37', isha: '20:49' },
  },
  {
    // Asia. Majlis Ugama Islam Singapura (muis.gov.sg), Singapore method, Shafi (adhan-js Shared/Times/Singapore-Singapore.json).
    city: 'Singapore', source: 'muis.gov.sg', latitude: 1.370844612058886, longitude: 103.80145644060552, timezone: 'Asia/Singapore',
    settings: { method: 'singapore', madhab: 'shafi' }, date: '2020-01-01',
    times: { fajr: '05:44', dhuhr: '13:10', asr: '16:34', maghrib: '19:10', isha: '20:25' },
  },
  {
    // Africa. Ministère des Habous (habous.gov.ma) for Casablanca: Fajr at 19°, Isha at 17°, and the
    // ministry's 5 minutes of precaution at Dhuhr and Maghrib (adhan-js's former Morocco method;
    // Shared/Times/Casablanca-Morocco.json).
    city: 'Casablanca', source: 'habous.gov.ma', latitude: 33.5731, longitude: -7.5898, timezone: 'Africa/Casablanca',
    settings: { method: 'other', madhab: 'shafi', fajr_angle: 19, isha_angle: 17, adjustments: { dhuhr: 5, maghrib: 5 } }, date: '2020-03-20',
    times: { fajr: '06:06', dhuhr: '13:43', asr: '17:06', maghrib: '19:47', isha: '21:01' },
  },
];

const minutes = (hhmm: string) => Number(hhmm.slice(0, 2)) * 60 + Number(hhmm.slice(3));

function timesFor(p: Pick<Published, 'latitude' | 'longitude' | 'timezone' | 'settings'>, date: string): MosqueTimes {
  return {
    id: 'm', timezone: p.timezone, params: parametersFor(p.settings),
    fields: { latitude: p.latitude, longitude: p.longitude, prayer_times: p.settings, azaan: {}, iqamah: {}, jumuah: [], auto_start: false },
  };
}

for (const p of PUBLISHED) {
  test(`${p.city}'s starts on ${p.date} are within 2 minutes of the timetable ${p.source} publishes`, () => {
    const slots = slotsOn(timesFor(p, p.date), parseDate(p.date)!, null);
    assert.equal(slots.length, 5);
    for (const slot of slots) {
      const published = p.times[slot.prayer as keyof Published['times']];
      const diff = Math.abs(minutes(localHhMm(slot.startsAt, p.timezone)) - minutes(published));
      assert.ok(diff <= 2, `${slot.prayer}: computed ${localHhMm(slot.startsAt, p.timezone)}, published ${published}`);
    }
  });
}

test('the date is the mosque\'s own calendar date whatever zone the server runs in', () => {
  // Auckland is 13 hours ahead of UTC in January: at 20:00 UTC on 1 January it is already 2 January there.
  const auckland = timesFor({ latitude: -36.85, longitude: 174.76, timezone: 'Pacific/Auckland', settings: { method: 'muslim_world_league', madhab: 'shafi' } }, '2026-01-02');
  const slots = slotsOn(auckland, { y: 2026, m: 1, d: 2 }, null);
  for (const slot of slots) {
    assert.equal(slot.date, '2026-01-02');
    // Every start falls on 2 January on Auckland's own clock.
    const local = new Intl.DateTimeFormat('en-CA', { timeZone: 'Pacific/Auckland' }).format(slot.startsAt);
    assert.equal(local, '2026-01-02', `${slot.prayer} is on ${local}`);
  }
});

test('on the day clocks go forward the local times move an hour later and the instants stay continuous', () => {
  const london = { latitude: 51.507194, longitude: -0.116711, timezone: 'Europe/London', settings: { method: 'moonsighting_committee', madhab: 'hanafi' } as PrayerTimesSettings };
  const m = timesFor(london, '2026-03-29');
  const before = slotsOn(m, { y: 2026, m: 3, d: 28 }, null); // Saturday, GMT
  const change = slotsOn(m, { y: 2026, m: 3, d: 29 }, null); // Sunday, BST from 01:00 UTC
  for (let i = 0; i < 5; i++) {
    const shift = minutes(change[i]!.azaanLocal) - minutes(before[i]!.azaanLocal);
    assert.ok(shift >= 55 && shift <= 63, `${change[i]!.prayer} moved by ${shift} min on the clock`);
    const dayApart = (change[i]!.startsAt - before[i]!.startsAt) / 60_000 - 24 * 60;
    assert.ok(Math.abs(dayApart) <= 3, `${change[i]!.prayer} instants are ${dayApart} min off a day apart`);
  }
  // Dhuhr near 13:1x on the changeover Sunday, as moonsighting.com's April table shows it (13:09 on 1 April 2016).
  assert.match(change[1]!.azaanLocal, /^13:0\d|^13:1\d/);
});

test('a Friday with two Jumu\'ah times has two jumuah slots in place of Dhuhr, each with its iqamah', () => {
  const m = timesFor({ latitude: 51.507194, longitude: -0.116711, timezone: 'Europe/London', settings: { method: 'muslim_world_league', madhab: 'shafi' } }, '2026-03-27');
  m.fields = { ...m.fields, jumuah: ['12:30', '13:45'], iqamah: { dhuhr: { after_minutes: 20 } } };
  const friday = slotsOn(m, { y: 2026, m: 3, d: 27 }, null);
  assert.deepEqual(friday.map((s) => `${s.prayer}#${s.index}`), ['fajr#0', 'jumuah#0', 'jumuah#1', 'asr#0', 'maghrib#0', 'isha#0']);
  const [first, second] = friday.filter((s) => s.prayer === 'jumuah');
  assert.equal(first!.azaanLocal, '12:30');
  assert.equal(second!.azaanLocal, '13:45');
  assert.equal(first!.source, 'fixed');
  assert.equal(localHhMm(first!.iqamahAt!, 'Europe/London'), '12:50');
  const thursday = slotsOn(m, { y: 2026, m: 3, d: 26 }, null);
  assert.ok(thursday.some((s) => s.prayer === 'dhuhr') && !thursday.some((s) => s.prayer === 'jumuah'));
});

test('offsets, fixed azaan times and iqamah rules apply per prayer', () => {
  const m = timesFor({ latitude: 21.4225, longitude: 39.8262, timezone: 'Asia/Riyadh', settings: { method: 'umm_al_qura', madhab: 'shafi' } }, '2026-05-01');
  m.fields = { ...m.fields, azaan: { fajr: { offset_minutes: 10 }, isha: { fixed: '21:15' } }, iqamah: { fajr: { after_minutes: 15 }, maghrib: { fixed: '19:00' } } };
  const slots = slotsOn(m, { y: 2026, m: 5, d: 1 }, null);
  const fajr = slots.find((s) => s.prayer === 'fajr')!;
  assert.equal(fajr.azaanAt - fajr.startsAt, 10 * 60_000);
  assert.equal(fajr.iqamahAt! - fajr.azaanAt, 15 * 60_000);
  assert.equal(fajr.source, 'calculated');
  const isha = slots.find((s) => s.prayer === 'isha')!;
  assert.equal(isha.azaanLocal, '21:15');
  assert.equal(isha.source, 'fixed');
  assert.equal(localHhMm(slots.find((s) => s.prayer === 'maghrib')!.iqamahAt!, 'Asia/Riyadh'), '19:00');
  assert.equal(slots.find((s) => s.prayer === 'asr')!.iqamahAt, null);
});

test('an uploaded day in standard time shows an hour later on a summer date', () => {
  const m = timesFor({ latitude: 59.91, longitude: 10.75, timezone: 'Europe/Oslo', settings: { method: 'muslim_world_league', madhab: 'shafi' } }, '2026-06-15');
  const day = { fajr: '02:00', dhuhr: '12:20', asr: '16:50', maghrib: '21:40', isha: '23:30' };
  const summer = slotsOn(m, { y: 2026, m: 6, d: 15 }, day);
  assert.deepEqual(summer.map((s) => s.azaanLocal), ['03:00', '13:20', '17:50', '22:40', '00:30']);
  assert.ok(summer.every((s) => s.source === 'timetable'));
  // Isha after midnight is the next calendar day's instant, not 23 hours early.
  assert.ok(summer[4]!.startsAt > summer[3]!.startsAt);
  const winter = slotsOn(m, { y: 2026, m: 1, d: 15 }, day);
  assert.deepEqual(winter.map((s) => s.azaanLocal), ['02:00', '12:20', '16:50', '21:40', '23:30']);
});

test('a method other than "other" takes explicit angles over its own', () => {
  const p = parametersFor({ method: 'umm_al_qura', madhab: 'hanafi', isha_angle: 17, high_latitude_rule: 'seventh_of_the_night' });
  assert.equal(p.ishaAngle, 17);
  assert.equal(p.ishaInterval, 0);
  assert.equal(p.madhab, 'hanafi');
  assert.equal(p.highLatitudeRule, 'seventhofthenight');
  const starts = startsOn(21.4225, 39.8262, p, { y: 2026, m: 5, d: 1 });
  assert.ok(starts.isha! - starts.maghrib! !== 90 * 60_000);
});

test('wall-clock times on either side of a transition are right whatever was asked before', () => {
  // Ask inside the quarter hour of the change first, then around it: no cached offset may leak across.
  assert.equal(localHhMm(Date.parse('2026-03-29T01:00:00Z'), 'Europe/London'), '02:00');
  assert.equal(localHhMm(Date.parse('2026-03-29T00:59:00Z'), 'Europe/London'), '00:59');
  assert.equal(localHhMm(Date.parse('2026-03-29T00:45:00Z'), 'Europe/London'), '00:45');
  assert.equal(localHhMm(Date.parse('2026-10-25T00:59:00Z'), 'Europe/London'), '01:59');
  assert.equal(localHhMm(Date.parse('2026-10-25T01:00:00Z'), 'Europe/London'), '01:00');
  // Half-hour and quarter-hour zones.
  assert.equal(localHhMm(Date.parse('2026-01-01T00:00:00Z'), 'Asia/Kathmandu'), '05:45');
  assert.equal(localHhMm(Date.parse('2026-01-01T00:00:00Z'), 'America/St_Johns'), '20:30');
});
