/**
 * A WAV file that stands in for a sound card (`minaret-device run --output FILE.wav`): 16-bit mono PCM whose
 * timeline is the wall clock's, as a sound card's is. Audio is appended where it plays; the time nothing played
 * is written as silence, up to now, when the next sound comes and when the file is closed, so a test can tell
 * from the file when a tone played and that silence followed a stop. A sound that arrives faster than real time
 * (an audio server's burst on connect) is queued after what is already written, as a sound card buffers it.
 *
 * The header's sizes are rewritten after every write, so the file reads as a whole WAV at any moment.
 */
import fs from 'node:fs';

export const WAV_RATE = 22_050;
const BYTES_PER_SAMPLE = 2;
const HEADER_BYTES = 44;
const ZEROS = Buffer.alloc(BYTES_PER_SAMPLE * WAV_RATE);

export class WavWriter {
  private readonly fd: number;
  private readonly startedAt = Date.now();
  private dataBytes = 0;
  private closed = false;

  constructor(readonly path: string) {
    this.fd = fs.openSync(path, 'w', 0o644);
    fs.writeSync(this.fd, header(0), 0, HEADER_BYTES, 0);
  }

  /** Appends PCM (s16le, WAV_RATE, mono) where the timeline stands: after silence up to now, or queued after a burst. */
  write(pcm: Buffer): void {
    if (this.closed) return;
    this.padToNow();
    const whole = pcm.length - (pcm.length % BYTES_PER_SAMPLE);
    if (whole <= 0) return;
    fs.writeSync(this.fd, pcm, 0, whole, HEADER_BYTES + this.dataBytes);
    this.dataBytes += whole;
    this.writeSizes();
  }

  /** Silence from the end of what was written up to the wall clock's now. */
  padToNow(): void {
    if (this.closed) return;
    const due = Math.floor(((Date.now() - this.startedAt) / 1000) * WAV_RATE) * BYTES_PER_SAMPLE;
    while (this.dataBytes < due) {
      const n = Math.min(ZEROS.length, due - this.dataBytes);
      fs.writeSync(this.fd, ZEROS, 0, n, HEADER_BYTES + this.dataBytes);
      this.dataBytes += n;
    }
    this.writeSizes();
  }

  close(): void {
    if (this.closed) return;
    this.padToNow();
    this.closed = true;
    fs.closeSync(this.fd);
  }

  private writeSizes(): void {
    const sizes = Buffer.alloc(4);
    sizes.writeUInt32LE(36 + this.dataBytes);
    fs.writeSync(this.fd, sizes, 0, 4, 4);
    sizes.writeUInt32LE(this.dataBytes);
    fs.writeSync(this.fd, sizes, 0, 4, 40);
  }
}

/** The canonical 44-byte RIFF/WAVE header of PCM s16le mono at WAV_RATE. */
function header(dataBytes: number): Buffer {
  const h = Buffer.alloc(HEADER_BYTES);
  h.write('RIFF', 0, 'ascii');
  h.writeUInt32LE(36 + dataBytes, 4);
  h.write('WAVE', 8, 'ascii');
  h.write('fmt ', 12, 'ascii');
  h.writeUInt32LE(16, 16);
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(WAV_RATE, 24);
  h.writeUInt32LE(WAV_RATE * BYTES_PER_SAMPLE, 28);
  h.writeUInt16LE(BYTES_PER_SAMPLE, 32);
  h.writeUInt16LE(16, 34);
  h.write('data', 36, 'ascii');
  h.writeUInt32LE(dataBytes, 40);
  return h;
}
