import fs from 'node:fs';
import net from 'node:net';
import readline from 'node:readline';
import bcrypt from 'bcryptjs';
import { systemClock } from '../src/platform/clock.ts';
import { loadConfig, withEnvFile, type Config } from '../src/platform/config.ts';
import { migrate, openDatabase } from '../src/platform/db.ts';
import { identifierHash, isSyntheticEmail, normalizeEmail, normalizePhone, sha256Hex } from '../src/platform/identifiers.ts';
import { normalizeStoredIdentifiersOnce } from '../src/people/addresses/identifier-migration.ts';
import { createUserStore } from '../src/people/users.ts';
import { sqliteStore } from '../src/platform/store/store.ts';
import { backupDatabase, restoreDatabase, BackupError } from './backup.ts';
import { migrateStore, MigrateStoreError } from './migrate-store.ts';
import type { OpenedPostgres } from '../src/platform/store/postgres.ts';
import type { Store } from '../src/platform/store/store.ts';
import { diagnose, timeline, SupportError, type ApiTarget } from './support.ts';
import { icecastXml } from '../icecast/icecast-xml.ts';
import { firmwareCommand, FirmwareCliError } from './firmware.ts';

/**
 * Operator commands (docs/operator.md, "The operator CLI"), as `minaret ...` or `npm run cli -- ...`. Every failure is one line on
 * stderr and a non-zero exit.
 *   superadmin create --email <email> [--phone <phone>]   (password: one line on standard input)
 *   backup <file> | restore <file>                        (the database at DATABASE_PATH)
 *   migrate-store --from <sqlite file> --to <postgres url>  (into an empty PostgreSQL, verified table by table)
 *   device diagnose|timeline <device id> [--url <url>] [--token-file <path>]   (or MINARET_TOKEN)
 *   icecast-config [--port <n>] [--bind <addr>] [--admin-password <pw>] [--source-password <pw>] [--log-dir <dir>]   (icecast.xml on stdout)
 *   firmware keygen --out <dir> | firmware sign --key <private key file> <image>   (offline: signed firmware images)
 */
// One line: every failure of the CLI is a single line on stderr.
const USAGE =
  'usage: minaret superadmin create --email <email> [--phone <phone>] (password on standard input) | ' +
  'minaret backup <file> | minaret restore <file> | minaret migrate-store --from <sqlite file> --to <postgres url> | ' +
  'minaret device diagnose|timeline <device id> [--url <http url>] [--token-file <path>] (or MINARET_TOKEN) | ' +
  'minaret icecast-config [--port <n>] [--bind <addr>] [--admin-password <pw>] [--source-password <pw>] [--log-dir <dir>] | ' +
  'minaret firmware keygen --out <dir> | minaret firmware sign --key <private key file> <image>';

/** `minaret --help`: the commands, one a line, on stdout (exit 0). */
const HELP = `minaret: operator commands
  superadmin create --email <email> [--phone <phone>]   create a superadmin (password: one line on standard input)
  backup <file>                                         copy the database at DATABASE_PATH to <file>
  restore <file>                                        replace the database at DATABASE_PATH with <file>
  migrate-store --from <sqlite file> --to <postgres url>   copy a deployment into an empty PostgreSQL and verify it
  device diagnose <device id> [--url <url>] [--token-file <path>]   why a device is or is not playing (or MINARET_TOKEN)
  device timeline <device id> [--url <url>] [--token-file <path>]   a device's recent timeline
  icecast-config [--port <n>] [--bind <addr>] [--admin-password <pw>] [--source-password <pw>] [--log-dir <dir>]
                                                        print icecast.xml for the audio gate (ICECAST_* settings, PUBLIC_URL)
  firmware keygen --out <dir>                           make the Ed25519 key pair that signs firmware images (keep it offline)
  firmware sign --key <private key file> <image>        print an image's signature, for X-Firmware-Signature`;

class CliError extends Error {}

function option(args: string[], name: string): string | undefined {
  const i = args.indexOf(name);
  if (i === -1) return undefined;
  const value = args[i + 1];
  if (value === undefined || value.startsWith('--')) throw new CliError(`${name} needs a value`);
  return value;
}

async function readPasswordLine(): Promise<string> {
  const rl = readline.createInterface({ input: process.stdin, terminal: false });
  try {
    for await (const line of rl) return line.replace(/\r$/, '');
    return '';
  } finally {
    rl.close();
  }
}

async function createSuperadmin(args: string[]): Promise<string> {
  const rawEmail = option(args, '--email');
  if (!rawEmail) throw new CliError(`--email is required; ${USAGE}`);
  // The same normalisers as the API's schemas (docs/api.md#identifiers), so the account signs in like any other.
  const checkedEmail = normalizeEmail(rawEmail);
  if (!checkedEmail.ok) throw new CliError(`--email: not an email address Minaret accepts (${checkedEmail.reason})`);
  const email = checkedEmail.value;
  if (isSyntheticEmail(email)) throw new CliError('--email: must not be in the reserved phone.invalid domain');
  const rawPhone = option(args, '--phone');
  const checkedPhone = rawPhone === undefined ? null : normalizePhone(rawPhone);
  if (checkedPhone && !checkedPhone.ok) throw new CliError(`--phone: ${checkedPhone.reason}`);
  const phone = checkedPhone?.ok ? checkedPhone.value : null;

  const loaded = settings();
  if (!loaded.ok) throw new CliError(loaded.error);
  const password = await readPasswordLine();
  if (password.length < 8) throw new CliError('password: at least 8 characters are required on standard input');

  const opened = await openStore(loaded.config);
  try {
    const users = await createUserStore(opened.store, systemClock);
    if ((await users.findProvenHolder(identifierHash(email))) || (phone && (await users.findProvenHolder(identifierHash(phone))))) {
      throw new CliError(`a user with that email or phone already exists`);
    }
    // The server stores bcrypt of the client-side SHA-256 hex digest, never the password (docs/decisions.md, "How secrets are kept").
    const passwordBcrypt = bcrypt.hashSync(sha256Hex(password), loaded.config.bcryptCost);
    // The operator vouches for the addresses: a superadmin's are proven from the start (docs/api.md, "Addresses: claims and proof").
    const user = await users.create({
      email, emailHash: identifierHash(email), phone, phoneHash: phone ? identifierHash(phone) : null, passwordBcrypt, role: 'superadmin',
      proven: { email: true, phone: true },
    });
    return `superadmin created: id ${user.id}, email ${user.email}`;
  } finally {
    await opened.close();
  }
}

/** The store the settings name (DATABASE_URL, else DATABASE_PATH), migrated as the service would at its start. */
async function openStore(config: Config): Promise<{ store: Store; close(): Promise<void> }> {
  if (config.postgres) {
    const { store } = await (await postgresOpener())(config.postgres.url, 'DATABASE_URL');
    return { store, close: () => store.destroy() };
  }
  const db = openDatabase(config.databasePath);
  migrate(db);
  // Before the duplicate check of superadmin create, which looks the normalised identifiers up (docs/operator.md).
  warnAboutIdentifiers(normalizeStoredIdentifiersOnce(db, Math.floor(systemClock() / 1000)));
  return { store: sqliteStore(db), close: async () => void db.close() };
}

/**
 * PostgreSQL for a command, migrated (src/platform/store/postgres.ts): two connections at most, and a statement
 * may take ten minutes (a large table's copy). The pg driver loads only when a command needs it; a PostgreSQL
 * that cannot be used is the command's one-line error.
 */
async function postgresOpener(): Promise<(url: string, setting: string) => Promise<OpenedPostgres>> {
  const { openPostgres } = await import('../src/platform/store/postgres.ts');
  return (url, setting) => openPostgres(url, { poolSize: 2, statementTimeoutMs: 10 * 60_000 }, setting).catch((err: Error) => {
    throw new CliError(err.message);
  });
}

async function migrateStoreCommand(args: string[]): Promise<string> {
  const from = option(args, '--from');
  const to = option(args, '--to');
  if (!from || !to) throw new CliError(`migrate-store needs --from <sqlite file> and --to <postgres url>; ${USAGE}`);
  const open = await postgresOpener();
  try {
    const tables = await migrateStore(from, to, (url) => open(url, '--to'));
    const rows = tables.reduce((n, t) => n + t.rows, 0);
    const width = Math.max(...tables.map((t) => t.table.length));
    const lines = tables.map((t) => `  ${t.table.padEnd(width)}  ${String(t.rows).padStart(9)} rows  checksum ${t.checksum}`);
    return [...lines, `moved ${rows} rows in ${tables.length} tables; every table's row count and checksum match`].join('\n');
  } catch (err) {
    if (err instanceof MigrateStoreError) throw new CliError(err.message);
    throw err;
  }
}

/** The rewrite's leftovers, one line each on stderr; the service would log the same at its start. */
function warnAboutIdentifiers(report: ReturnType<typeof normalizeStoredIdentifiersOnce>): void {
  for (const c of report?.collisions ?? []) process.stderr.write(`warning: users ${c.userIds.join(', ')}: their ${c.field}s normalise to the same one; none was changed\n`);
  for (const r of report?.refused ?? []) process.stderr.write(`warning: user ${r.userId}: the stored ${r.field} is refused by today's rules; left as it is\n`);
}

function apiTarget(args: string[]): ApiTarget {
  return { url: option(args, '--url') ?? process.env.MINARET_URL ?? 'http://127.0.0.1:8080', token: accessToken(args) };
}

/** Never from the arguments: they show in `ps`, in the shell history and in npm's banner line. */
function accessToken(args: string[]): string {
  if (args.some((a) => a === '--token' || a.startsWith('--token='))) {
    throw new CliError('--token is refused: arguments show in the process list, the shell history and npm\'s banner; set MINARET_TOKEN or pass --token-file <path>');
  }
  const file = option(args, '--token-file');
  if (file !== undefined) {
    let text: string;
    try {
      text = fs.readFileSync(file, 'utf8');
    } catch (err) {
      throw new CliError(`--token-file: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? 'error'})`);
    }
    const token = text.trim();
    if (!token) throw new CliError(`--token-file: ${file} is empty`);
    return token;
  }
  const token = process.env.MINARET_TOKEN?.trim();
  if (!token) throw new CliError('an access token is required (the device owner, a manager or a superadmin): set MINARET_TOKEN or pass --token-file <path>');
  return token;
}

async function databaseCommand(command: 'backup' | 'restore', args: string[]): Promise<string> {
  const file = args[0];
  if (!file || file.startsWith('--') || args.length > 1) throw new CliError(`${command} needs exactly one file; ${USAGE}`);
  const loaded = settings();
  if (!loaded.ok) throw new CliError(loaded.error);
  if (loaded.config.postgres) throw new CliError(`DATABASE_URL is set: ${command} is for the SQLite file; back up PostgreSQL with pg_dump (docs/operator.md, "Several hosts")`);
  if (loaded.config.databasePath === ':memory:') throw new CliError(`DATABASE_PATH: ${command} needs a database file, not :memory:`);
  try {
    return command === 'backup' ? await backupDatabase(loaded.config.databasePath, file) : await restoreDatabase(loaded.config.databasePath, file);
  } catch (err) {
    if (err instanceof BackupError) throw new CliError(err.message);
    throw err;
  }
}

const isLoopback = (host: string) => host === 'localhost' || host === '[::1]' || /^127\./.test(host);

/**
 * icecast.xml from the ICECAST_* settings and PUBLIC_URL (docs/operator.md#audio-icecast). The admin password is
 * ICECAST_ADMIN_PASSWORD unless --admin-password names another; the port that of ICECAST_ADMIN_URL, else 8000.
 */
function icecastConfig(args: string[]): string {
  const loaded = settings();
  if (!loaded.ok) throw new CliError(loaded.error);
  const { config } = loaded;
  if (!config.icecast) throw new CliError('ICECAST_URL: required by icecast-config (with ICECAST_HOOK_SECRET and ICECAST_ADMIN_PASSWORD)');
  const portText = option(args, '--port');
  const adminPort = new URL(config.icecast.adminUrl).port;
  const port = portText === undefined ? (adminPort ? Number(adminPort) : 8000) : Number(portText);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new CliError('--port: must be a whole number from 1 to 65535');
  const bindAddress = option(args, '--bind') ?? '127.0.0.1';
  if (net.isIP(bindAddress) === 0) throw new CliError('--bind: must be an IP address (127.0.0.1, the default; 0.0.0.0 for every interface)');
  if (option(args, '--bind') === undefined && !isLoopback(new URL(config.icecast.url).hostname)) {
    process.stderr.write(`minaret: Icecast will listen on 127.0.0.1 only: serve ${config.icecast.url} through a TLS reverse proxy to it, or pass --bind <address> (listener addresses carry leases)\n`);
  }
  const sourcePassword = option(args, '--source-password');
  const adminPassword = option(args, '--admin-password') ?? config.icecast.adminPassword;
  for (const [name, value] of [['--admin-password', adminPassword], ['--source-password', sourcePassword]] as const) {
    if (value !== undefined && value.length < 12) throw new CliError(`${name}: at least 12 characters (Icecast's admin API removes listeners)`);
  }
  // Icecast refuses to run as root; started as root with <changeowner>, it binds its port and then becomes icecast2.
  const asRoot = process.getuid?.() === 0;
  return icecastXml({
    port, bindAddress, adminUser: config.icecast.adminUser, adminPassword, sourcePassword, hookSecret: config.icecast.hookSecret,
    minaretUrl: config.publicUrl ?? `http://127.0.0.1:${config.httpPort}`,
    hostname: new URL(config.icecast.url).hostname,
    logDir: option(args, '--log-dir') ?? '/var/log/icecast2',
    ...(asRoot && { changeOwner: { user: 'icecast2', group: 'icecast' } }),
  }).trimEnd();
}

/** The settings, from the environment over ./minaret.env or MINARET_ENV_FILE as `npm start` reads them (docs/operator.md). */
function settings(): ReturnType<typeof loadConfig> {
  const env = withEnvFile(process.env, process.cwd());
  return env.ok ? loadConfig(env.env) : env;
}

async function run(argv: string[]): Promise<string> {
  const [group, command, ...rest] = argv;
  if (group === '--help' || group === '-h' || group === 'help') return HELP;
  if (group === 'icecast-config') return icecastConfig(argv.slice(1));
  if (group === 'superadmin' && command === 'create') return createSuperadmin(rest);
  if (group === 'firmware') {
    try {
      return firmwareCommand(command, rest);
    } catch (err) {
      if (err instanceof FirmwareCliError) throw new CliError(err.message);
      throw err;
    }
  }
  if (group === 'migrate-store') return migrateStoreCommand(argv.slice(1));
  if ((group === 'backup' || group === 'restore') && command !== undefined) return databaseCommand(group, [command, ...rest]);
  if (group === 'device' && (command === 'diagnose' || command === 'timeline')) {
    const deviceId = rest[0];
    if (!deviceId || deviceId.startsWith('--')) throw new CliError(`device ${command} needs a device id`);
    const target = apiTarget(rest);
    try {
      return command === 'diagnose' ? await diagnose(target, deviceId) : await timeline(target, deviceId);
    } catch (err) {
      if (err instanceof SupportError) throw new CliError(err.message);
      throw err;
    }
  }
  throw new CliError(USAGE);
}

run(process.argv.slice(2)).then(
  (line) => {
    process.stdout.write(line + '\n');
  },
  (err: Error) => {
    process.stderr.write(`minaret: ${err instanceof CliError ? err.message : `unexpected error: ${err.message}`}\n`);
    process.exitCode = 1;
  },
);
