/**
 * The Linux board's own hardware as the contract reports it (docs/firmware.md, "3.1 Status" and "3.2 Heartbeat"):
 * MAC and address of the first interface up, the Wi-Fi level from /proc/net/wireless, free memory, the SoC's
 * temperature (transmitters) and the board's model as hw_rev. Read once at start and once a heartbeat: nothing
 * polls between.
 */
import fs from 'node:fs';
import os from 'node:os';
import type { DeviceKind, Hardware } from './contract/types.ts';

const readText = (file: string): string | null => {
  try {
    return fs.readFileSync(file, 'utf8');
  } catch {
    return null;
  }
};

/**
 * A board's model as a hw_rev: 1 to 64 of A-Z a-z 0-9 . _ - (docs/api.md, "Firmware updates"), each run of other
 * characters one `-` (`Raspberry-Pi-4-Model-B-Rev-1.4`). The service records no other shape, and images are
 * uploaded under this name; null when nothing is left.
 */
export function hwRevOf(model: string): string | null {
  return model.replace(/[^A-Za-z0-9._-]+/g, '-').replace(/^-+|-+$/g, '').slice(0, 64) || null;
}

/** The board's model (a Raspberry Pi names itself in the device tree), else the OS and CPU architecture, as a hw_rev. */
export function boardModel(): string {
  const model = readText('/proc/device-tree/model')?.replace(/\0/g, '').trim();
  return hwRevOf(model || `${os.type()} ${os.arch()}`) ?? os.arch();
}

export class LinuxBoard implements Hardware {
  mac: string | undefined;
  ip: string | undefined;
  readonly ssid: string | undefined = undefined;
  readonly hwRev = boardModel();
  private wifiIface: string | undefined;
  private level: number | undefined;
  private temp: number | undefined;

  constructor(private readonly kind: DeviceKind) {
    this.sample();
  }

  rssi(): number | undefined {
    return this.level;
  }
  freeHeap(): number {
    return os.freemem();
  }
  tempC(): number | undefined {
    return this.kind === 'transmitter' ? this.temp : undefined;
  }

  sample(): void {
    const nic = Object.entries(os.networkInterfaces())
      .flatMap(([name, addrs]) => (addrs ?? []).map((a) => ({ name, ...a })))
      .find((a) => !a.internal && a.family === 'IPv4');
    this.mac = nic && nic.mac !== '00:00:00:00:00:00' ? nic.mac.toUpperCase() : undefined;
    this.ip = nic?.address;
    this.wifiIface = nic?.name;
    this.level = this.wifiLevel();
    const milli = Number(readText('/sys/class/thermal/thermal_zone0/temp'));
    this.temp = Number.isFinite(milli) && milli > 0 ? Math.round(milli / 100) / 10 : undefined;
  }

  /** /proc/net/wireless: "wlan0: 0000   54.  -56.  -256 ...", the level in dBm, for the interface in use. */
  private wifiLevel(): number | undefined {
    const lines = readText('/proc/net/wireless')?.split('\n').slice(2) ?? [];
    const line = lines.find((l) => l.trim().startsWith(`${this.wifiIface ?? ''}:`));
    const level = Math.round(Number(line?.trim().split(/\s+/)[3]?.replace(/\.$/, '')));
    return Number.isInteger(level) && level >= -150 && level <= 0 ? level : undefined;
  }
}
