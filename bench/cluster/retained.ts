/**
 * Retained lookups in Redis mode (part of `npm run bench:cluster`): the time and Redis CPU of one SUBSCRIBE
 * with no unrelated retained messages and with 10,000 (other devices' statuses), through aedes on the
 * library's Redis persistence (the baseline) and on the same persistence with broker/delivery/retained-index.ts,
 * in the same run against the same redis-server; and what the index costs each retained store.
 *
 *   npx tsx bench/cluster/retained.ts [--unrelated <n>=10000] [--subscribes <r>=40] [--runs <k>=2] [--no-write]
 *
 * Both brokers run in this process on one real redis-server (its own process, so its CPU is its own); a
 * plain mqtt.js client subscribes, waits for the filter's retained messages, unsubscribes, R times.
 */
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { Aedes } from 'aedes';
import redisPersistence from 'aedes-persistence-redis';
import { Redis } from 'ioredis';
import mqtt from 'mqtt';
import { createIndexedRedisPersistence } from '../../broker/delivery/retained-index.ts';
import { CONTENDED_CORES, cli, cpuPerMessageUs, fmt, machine, percentile, pool, range, ratios, writeSubsection } from '../support.ts';
import { HOST, cpuWindow, runBench, startRedisServer, type RedisServer } from './processes.ts';
import { SECTION, SECTION_INTRO, subsectionOrder } from './sections.ts';

const args = process.argv.slice(2);
const opts = cli('usage: npx tsx bench/cluster/retained.ts [--unrelated <n>=10000] [--subscribes <r>=40] [--runs <k>=2] [--no-write]', {
  unrelated: { type: 'number', default: 10_000, min: 1 },
  subscribes: { type: 'number', default: 40, min: 1 },
  runs: { type: 'number', default: 2, min: 1 },
  'no-write': { type: 'boolean' },
}, args);
const UNRELATED = opts.unrelated;
const SUBSCRIBES = opts.subscribes;
const RUNS = opts.runs;
const WRITE = !opts['no-write'];

/** The filters measured and how many retained messages each must bring. */
const FILTERS: Array<{ filter: string; expect: number; what: string }> = [
  { filter: 'devices/target/config', expect: 1, what: 'exact: what a device sends' },
  { filter: 'devices/target/#', expect: 2, what: 'fixed prefix' },
  { filter: 'mosques/m1/#', expect: 1, what: 'fixed prefix' },
  { filter: '+/target/status', expect: 1, what: 'no fixed prefix: scan either way' },
];
const TARGETS = ['devices/target/config', 'devices/target/status', 'mosques/m1/broadcast'];

type Kind = 'library' | 'indexed';

async function broker(url: string, kind: Kind) {
  const conn = new Redis(url, { maxRetriesPerRequest: 1 });
  let persistence = redisPersistence({ conn });
  if (kind === 'indexed') {
    persistence = createIndexedRedisPersistence(persistence, conn, (err) => console.error(err));
    if (!(await (persistence as { retainedIndexReady: Promise<boolean> }).retainedIndexReady)) throw new Error('index not ready');
  }
  const aedes = await Aedes.createBroker({ persistence: persistence as never });
  const server = net.createServer({ noDelay: true }, (s) => aedes.handle(s));
  await new Promise<void>((r) => server.listen(0, HOST, r));
  const client = await mqtt.connectAsync(`mqtt://${HOST}:${(server.address() as net.AddressInfo).port}`, { clientId: `bench-${kind}`, reconnectPeriod: 0 });
  return {
    client,
    async close() {
      await client.endAsync();
      await new Promise<void>((r) => aedes.close(() => r()));
      server.close();
      conn.disconnect();
    },
  };
}

const redisCpu = async (redis: Redis) => {
  const info = await redis.info('cpu');
  const get = (k: string) => Number(new RegExp(`^${k}:([\\d.]+)`, 'm').exec(info)?.[1] ?? Number.NaN);
  return get('used_cpu_user') + get('used_cpu_sys');
};

/** R subscribes to one filter: ms from SUBSCRIBE to its last retained message, and Redis CPU per SUBSCRIBE. */
async function subscribes(client: mqtt.MqttClient, redis: Redis, filter: string, expect: number) {
  const times: number[] = [];
  const cpu0 = await redisCpu(redis);
  for (let r = 0; r < SUBSCRIBES; r++) {
    let got = 0;
    const t0 = performance.now();
    const all = new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`${filter}: ${got}/${expect} retained within 30 s`)), 30_000);
      const on = (_t: string, _p: Buffer, packet: { retain: boolean }) => {
        if (packet.retain && ++got === expect) {
          clearTimeout(timer);
          client.off('message', on);
          resolve();
        }
      };
      client.on('message', on);
    });
    await client.subscribeAsync(filter, { qos: 1 });
    await all;
    times.push(performance.now() - t0);
    await client.unsubscribeAsync(filter);
  }
  return { p50: percentile(times, 50), p90: percentile(times, 90), redisUs: cpuPerMessageUs((await redisCpu(redis)) - cpu0, SUBSCRIBES) };
}

/** N retained QoS 1 stores through one broker, 100 in flight: stores/s and Redis CPU per store. */
async function stores(client: mqtt.MqttClient, redis: Redis, server: RedisServer, n: number, payload: string) {
  const close = cpuWindow([server.pid]);
  const cpu0 = await redisCpu(redis);
  await pool(n, 100, (i) => client.publishAsync(`devices/o${i}/status`, payload, { qos: 1, retain: true }).then(() => undefined));
  const spent = close();
  return { perS: n / spent.seconds, redisUs: cpuPerMessageUs((await redisCpu(redis)) - cpu0, n), otherCores: spent.otherCores ?? 0 };
}

type Run = Record<string, number>;

async function oneRun(): Promise<Run> {
  const server = await startRedisServer();
  const out: Run = {};
  try {
    const lib = await broker(server.url, 'library');
    const idx = await broker(server.url, 'indexed');
    for (const t of TARGETS) await idx.client.publishAsync(t, JSON.stringify({ v: '1.0', topic: t }), { qos: 1, retain: true });
    for (const stage of ['0', 'n'] as const) {
      if (stage === 'n') {
        const status = (s: string) => JSON.stringify({ v: '1.0', status: s, ts: 1_790_000_000, fw: '2.0.1' });
        const first = await stores(idx.client, server.client, server, UNRELATED, status('ONLINE'));
        // Overwrites of the same topics, alternately, so neither kind gets only the inserts.
        const plain = await stores(lib.client, server.client, server, UNRELATED, status('PLAYING'));
        const indexed = await stores(idx.client, server.client, server, UNRELATED, status('ONLINE'));
        Object.assign(out, { storeLibPerS: plain.perS, storeLibUs: plain.redisUs, storeIdxPerS: indexed.perS, storeIdxUs: indexed.redisUs });
        out['otherCores'] = Math.max(out['otherCores'] ?? 0, first.otherCores, plain.otherCores, indexed.otherCores);
      }
      for (const [i, f] of FILTERS.entries()) {
        // Alternating which kind goes first, so neither always meets a Redis just warmed by the other.
        const kinds = [['library', lib], ['indexed', idx]] as const;
        for (const [kind, b] of i % 2 === 0 ? kinds : [...kinds].reverse()) {
          const close = cpuWindow([server.pid]);
          const r = await subscribes(b.client, server.client, f.filter, f.expect);
          out['otherCores'] = Math.max(out['otherCores'] ?? 0, close().otherCores ?? 0);
          Object.assign(out, { [`${kind}${i}_${stage}_p50`]: r.p50, [`${kind}${i}_${stage}_p90`]: r.p90, [`${kind}${i}_${stage}_redis`]: r.redisUs });
        }
      }
    }
    // A scan may still be reading the hash after its last expected message: let it finish before closing.
    await new Promise((r) => setTimeout(r, 2000));
    await lib.close();
    await idx.close();
  } finally {
    await server.stop();
  }
  return out;
}

function report(runs: Run[], date: string, command: string): string {
  const r = (key: string, digits = 2) => range(runs.map((x) => x[key]!), digits);
  const ratio = (a: string, b: string) => ratios(runs.map((x) => x[a]!), runs.map((x) => x[b]!), 1);
  const n = UNRELATED.toLocaleString('en-US');
  const L = [
    '### Retained lookups: one SUBSCRIBE with 0 and with ' + n + ' unrelated retained messages',
    '',
    `- Date: ${date}`,
    `- Command: \`${command}\``,
    ...machine(),
    `- Two aedes brokers in the bench process on one redis-server (${RUNS} runs, a fresh redis-server each): the library's persistence (aedes-persistence-redis, the baseline) and the same with broker/delivery/retained-index.ts. ${SUBSCRIBES} SUBSCRIBE → last retained message → UNSUBSCRIBE per cell, one after the other; the unrelated messages are ${n} retained statuses \`devices/o{i}/status\`. Redis CPU is redis-server's used_cpu_user + used_cpu_sys (INFO cpu) over the cell.`,
    '',
    '| Filter | library: p50 ms at 0 → at ' + n + ' (growth) | indexed: p50 ms at 0 → at ' + n + ' (growth) | Redis CPU per SUBSCRIBE at ' + n + ': library / indexed (µs) |',
    '|---|---:|---:|---:|',
  ];
  for (const [i, f] of FILTERS.entries()) {
    L.push(
      `| \`${f.filter}\` (${f.what}) | ${r(`library${i}_0_p50`)} → ${r(`library${i}_n_p50`)} (${ratio(`library${i}_n_p50`, `library${i}_0_p50`)}) | ` +
        `${r(`indexed${i}_0_p50`)} → ${r(`indexed${i}_n_p50`)} (${ratio(`indexed${i}_n_p50`, `indexed${i}_0_p50`)}) | ${r(`library${i}_n_redis`, 0)} / ${r(`indexed${i}_n_redis`, 0)} |`,
    );
  }
  L.push(
    `| Retained store (${n} QoS 1 overwrites, 100 in flight): stores/s, Redis CPU per store (µs) | ${r('storeLibPerS', 0)}/s, ${r('storeLibUs', 1)} µs | ${r('storeIdxPerS', 0)}/s, ${r('storeIdxUs', 1)} µs | |`,
  );
  const other = Math.max(...runs.map((x) => x['otherCores']!));
  L.push(
    '',
    `**Reading.** An exact filter, the only kind a Minaret device may send, was never a scan: the library answers it with one HGET, and its cost does not grow with the retained messages in either column. ` +
      `A filter with a wildcard was an HSCAN of the whole \`retained\` hash inside redis-server (MATCH filters after reading every field), so its time and, worse, Redis's CPU (shared by every process) grew with every retained message; ` +
      `with the index it reads only the range of topics under its fixed prefix. A filter whose first level is a wildcard has no prefix and still scans. ` +
      `The price is one more Redis command per retained store (a script that mirrors the hash into the sorted set), in the last row.` +
      (other > CONTENDED_CORES ? ` **Contended**: other processes took up to ${fmt(other, 2)} cores during a cell.` : ` Other processes took at most ${fmt(other, 2)} cores during a cell.`),
    '',
  );
  return L.join('\n');
}

async function main(): Promise<void> {
  const date = new Date().toISOString();
  const command = args.length ? `npx tsx bench/cluster/retained.ts ${args.join(' ')}` : 'npm run bench:cluster';
  const runs: Run[] = [];
  for (let k = 0; k < RUNS; k++) {
    console.log(`retained lookups: run ${k + 1}/${RUNS} ...`);
    runs.push(await oneRun());
    console.log(JSON.stringify(runs[k], (_k, v: unknown) => (typeof v === 'number' ? Math.round(v * 100) / 100 : v)));
  }
  const text = report(runs, date, command);
  console.log(`\n${text}`);
  if (WRITE) writeSubsection(SECTION, SECTION_INTRO, text, subsectionOrder);
}

runBench('retained bench', main);
