/**
 * A QR code for a terminal, two modules a character with Unicode half blocks (▀ ▄ █), so a phone can open the
 * pairing link from the board's console or an SSH session. uqr is the encoder the console already ships.
 */
import { renderUnicodeCompact } from 'uqr';

export function qrLines(text: string): string[] {
  return renderUnicodeCompact(text, { border: 2, ecc: 'M' }).split('\n').filter((l) => l !== '');
}
