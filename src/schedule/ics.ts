import type { Slot } from './slots.ts';

/** RFC 5545 3.1: lines longer than 75 octets are folded with CRLF and one space. */
export function foldLine(line: string): string {
  const out: string[] = [];
  let current = '';
  let octets = 0;
  for (const ch of line) {
    const size = Buffer.byteLength(ch);
    if (octets + size > (out.length === 0 ? 75 : 74)) {
      out.push(current);
      current = '';
      octets = 0;
    }
    current += ch;
    octets += size;
  }
  out.push(current);
  return out.join('\r\n ');
}

/**
 * RFC 5545 §3.3.11: TEXT escapes backslash, semicolon and comma, and writes a line break as `\n`. A line break
 * is CRLF, LF or a bare CR (a bare CR left in would end the line early for some readers, and let text forge
 * properties); other control characters are not allowed in TEXT at all, so they are dropped. Names are refused
 * them at the API, but this writer must be safe whatever the store holds.
 */
const escapeText = (s: string) =>
  s.replace(/[\\;,]/g, (c) => `\\${c}`).replace(/\r\n|\r|\n/g, '\\n').replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
const stamp = (ms: number) => new Date(ms).toISOString().replace(/[-:]/g, '').replace(/\.\d{3}/, '');
const name = (prayer: string) => (prayer === 'jumuah' ? "Jumu'ah" : prayer[0]!.toUpperCase() + prayer.slice(1));

/**
 * One VEVENT per azaan, times in UTC. The UID is the slot's identity (mosque, date, prayer, index), so a
 * calendar that refreshes the feed updates an event whose time moved instead of adding a second one.
 */
export function toIcs(mosque: { id: string; name: string }, slots: Slot[], nowMs: number, host: string): string {
  const lines = [
    'BEGIN:VCALENDAR', 'VERSION:2.0', 'PRODID:-//Minaret//Azaan schedule//EN', 'CALSCALE:GREGORIAN', 'METHOD:PUBLISH',
    `X-WR-CALNAME:${escapeText(`${mosque.name}: azaan`)}`,
  ];
  for (const s of slots) {
    lines.push(
      'BEGIN:VEVENT',
      `UID:${s.mosqueId}-${s.date}-${s.prayer}-${s.index}@${host}`,
      `DTSTAMP:${stamp(nowMs)}`,
      `DTSTART:${stamp(s.azaanAt)}`,
      `DTEND:${stamp(s.iqamahAt !== null && s.iqamahAt > s.azaanAt ? s.iqamahAt : s.azaanAt + 5 * 60_000)}`,
      `SUMMARY:${escapeText(`${name(s.prayer)} azaan, ${mosque.name}`)}`,
      `DESCRIPTION:${escapeText(`${name(s.prayer)} begins ${new Date(s.startsAt).toISOString()}; azaan ${s.azaanLocal} local (${s.source}).`)}`,
      'TRANSP:TRANSPARENT',
      'END:VEVENT',
    );
  }
  lines.push('END:VCALENDAR');
  return lines.map(foldLine).join('\r\n') + '\r\n';
}
