/**
 * Icecast 2.4 (Debian's icecast2) and ffmpeg for bench/audio/audio.ts: the gated server as
 * `minaret icecast-config` prints it, an ungated one beside it as the baseline, and a tone source.
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { ROOT } from '../support.ts';

export interface Icecast {
  port: number;
  version: string;
  sourcePassword: string;
  admin(p: string): Promise<string>;
  freePort(): Promise<number>;
  waitForMount(mount: string): Promise<void>;
  stop(): Promise<void>;
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as net.AddressInfo;
      server.close(() => resolve(port));
    });
  });
}

/** icecast2 refuses root: as root, the config's <changeowner> hands it to the icecast2 user, whose folder this is. */
function ownFolder(dir: string): void {
  fs.chmodSync(dir, 0o755);
  if (process.getuid?.() !== 0) return;
  const uid = Number(execFileSync('id', ['-u', 'icecast2'], { encoding: 'utf8' }).trim());
  fs.chownSync(dir, uid, 0);
}

async function run(dir: string, name: string, port: number, xml: string, adminPassword: string, sourcePassword: string): Promise<Icecast> {
  const folder = path.join(dir, name);
  fs.mkdirSync(folder);
  ownFolder(folder);
  const file = path.join(folder, 'icecast.xml');
  fs.writeFileSync(file, xml.replace(/<logdir>[^<]*<\/logdir>/, `<logdir>${folder}</logdir>`));
  const child: ChildProcess = spawn('/usr/bin/icecast2', ['-c', file], { stdio: 'ignore' });
  const admin = async (p: string) => {
    const res = await fetch(`http://127.0.0.1:${port}${p}`, { headers: { authorization: `Basic ${Buffer.from(`admin:${adminPassword}`).toString('base64')}` } });
    return res.text();
  };
  const deadline = Date.now() + 10_000;
  for (;;) {
    if ((await admin('/admin/listmounts').catch(() => '')).includes('icestats')) break;
    if (Date.now() > deadline || child.exitCode !== null) throw new Error(`icecast2 (${name}) did not start on ${port}`);
    await new Promise((r) => setTimeout(r, 100));
  }
  const version = execFileSync('/usr/bin/icecast2', ['-v'], { encoding: 'utf8' }).trim().replace(/^Icecast /, '');
  return {
    port, version, sourcePassword, admin, freePort,
    async waitForMount(mount) {
      const until = Date.now() + 15_000;
      while (!(await admin('/admin/listmounts')).includes(mount)) {
        if (Date.now() > until) throw new Error(`no source on ${mount}`);
        await new Promise((r) => setTimeout(r, 20));
      }
    },
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}

/** The gated server, configured by the CLI exactly as an operator would (PUBLIC_URL names this service). */
export async function gatedIcecast(dir: string, port: number, env: Record<string, string>): Promise<Icecast> {
  const xml = execFileSync(process.execPath, [path.join(ROOT, 'bin/minaret.mjs'), 'icecast-config', '--port', String(port), '--log-dir', dir], { env: { ...process.env, ...env }, cwd: ROOT, encoding: 'utf8' });
  return run(dir, 'gated', port, xml, env.ICECAST_ADMIN_PASSWORD!, '');
}

/** The baseline: the same limits, no URL authentication; one source password for every mount. */
export async function plainIcecast(dir: string): Promise<Icecast> {
  const port = await freePort();
  const adminPassword = crypto.randomBytes(12).toString('hex');
  const sourcePassword = crypto.randomBytes(12).toString('hex');
  const owner = process.getuid?.() === 0 ? '<security><chroot>0</chroot><changeowner><user>icecast2</user><group>icecast</group></changeowner></security>' : '';
  const xml = `<icecast>
  <limits><clients>5000</clients><sources>4</sources><queue-size>524288</queue-size><burst-size>65535</burst-size><source-timeout>10</source-timeout></limits>
  <authentication><source-password>${sourcePassword}</source-password><admin-user>admin</admin-user><admin-password>${adminPassword}</admin-password></authentication>
  <hostname>127.0.0.1</hostname>
  <listen-socket><port>${port}</port><bind-address>127.0.0.1</bind-address></listen-socket>
  <fileserve>0</fileserve>
  <paths><logdir>${dir}</logdir><basedir>/usr/share/icecast2</basedir><webroot>/usr/share/icecast2/web</webroot><adminroot>/usr/share/icecast2/admin</adminroot></paths>
  <logging><loglevel>1</loglevel><accesslog>access.log</accesslog><errorlog>error.log</errorlog></logging>
  ${owner}
</icecast>`;
  return run(dir, 'plain', port, xml, adminPassword, sourcePassword);
}

/** ffmpeg sends a 440 Hz tone as an Icecast source client. */
export function startSource(port: number, mount: string, user: string, password: string): { stop(): Promise<void> } {
  const url = `icecast://${encodeURIComponent(user)}:${encodeURIComponent(password)}@127.0.0.1:${port}${mount}`;
  const child = spawn('/usr/bin/ffmpeg', ['-nostdin', '-loglevel', 'error', '-re', '-f', 'lavfi', '-i', 'sine=frequency=440', '-c:a', 'libmp3lame', '-b:a', '64k', '-content_type', 'audio/mpeg', '-f', 'mp3', url], { stdio: 'ignore' });
  return {
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
