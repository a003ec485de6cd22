import { CalculationMethod, CalculationParameters, Coordinates, HighLatitudeRule, Madhab, PrayerTimes } from 'adhan';
import type { Prayer, PrayerTimesSettings } from '../mosques/mosques.ts';
import type { CivilDate } from './zone.ts';

const METHODS: Record<Exclude<PrayerTimesSettings['method'], 'other'>, () => CalculationParameters> = {
  muslim_world_league: CalculationMethod.MuslimWorldLeague,
  egyptian: CalculationMethod.Egyptian,
  karachi: CalculationMethod.Karachi,
  umm_al_qura: CalculationMethod.UmmAlQura,
  dubai: CalculationMethod.Dubai,
  qatar: CalculationMethod.Qatar,
  kuwait: CalculationMethod.Kuwait,
  moonsighting_committee: CalculationMethod.MoonsightingCommittee,
  singapore: CalculationMethod.Singapore,
  turkey: CalculationMethod.Turkey,
  tehran: CalculationMethod.Tehran,
  north_america: CalculationMethod.NorthAmerica,
};

const RULES = {
  middle_of_the_night: HighLatitudeRule.MiddleOfTheNight,
  seventh_of_the_night: HighLatitudeRule.SeventhOfTheNight,
  twilight_angle: HighLatitudeRule.TwilightAngle,
} as const;

/** adhan's parameters for a mosque's settings. `other` needs both angles (checked at the edge). */
export function parametersFor(s: PrayerTimesSettings): CalculationParameters {
  const p = s.method === 'other' ? new CalculationParameters('Other', s.fajr_angle ?? 18, s.isha_angle ?? 17) : METHODS[s.method]();
  if (s.method !== 'other' && s.fajr_angle !== undefined) p.fajrAngle = s.fajr_angle;
  if (s.method !== 'other' && s.isha_angle !== undefined) {
    // Umm al-Qura and Qatar put Isha a fixed interval after Maghrib; an explicit angle replaces that.
    p.ishaAngle = s.isha_angle;
    p.ishaInterval = 0;
  }
  p.madhab = s.madhab === 'hanafi' ? Madhab.Hanafi : Madhab.Shafi;
  if (s.high_latitude_rule) p.highLatitudeRule = RULES[s.high_latitude_rule];
  for (const [prayer, minutes] of Object.entries(s.adjustments ?? {})) p.adjustments[prayer as Prayer] = minutes;
  return p;
}

export type DayStarts = Record<Prayer | 'sunrise', number | null>;

/**
 * The starts on a civil date in the mosque's zone, as Unix milliseconds (null where adhan has none).
 * adhan reads the local year, month and day fields of the Date it is given: a Date built from the
 * mosque's own calendar date in this process's zone carries exactly those, whatever zone the server runs in.
 */
export function startsOn(latitude: number, longitude: number, params: CalculationParameters, date: CivilDate): DayStarts {
  const t = new PrayerTimes(new Coordinates(latitude, longitude), new Date(date.y, date.m - 1, date.d), params);
  const ms = (d: Date) => (Number.isFinite(d.getTime()) ? d.getTime() : null);
  return { fajr: ms(t.fajr), sunrise: ms(t.sunrise), dhuhr: ms(t.dhuhr), asr: ms(t.asr), maghrib: ms(t.maghrib), isha: ms(t.isha) };
}
