import { spawnSync, type SpawnSyncReturns } from 'node:child_process';
import fs from 'node:fs';
import type { TestContext } from 'node:test';
import { ensureBuilt, startProcess, type Run } from '../support/process.ts';

/**
 * Separate hosts on one machine, for the tests of several nodes (docs/operator.md, "Several hosts"): each host a
 * Linux network namespace of its own with one address on a private /24, joined by a veth pair to a bridge in
 * this (the root) namespace, which holds the network's first address (the gateway). What runs in a host sees
 * only its own interfaces: its own 127.0.0.1, its own address, and the others through the bridge. PostgreSQL,
 * Redis and HAProxy stay in the root namespace and listen on the gateway address (and on 127.0.0.1, where the
 * test reaches them); the nodes run inside the hosts. A host is cut off by taking its bridge-side link down: the
 * packets of its open connections are then dropped without a word, as a pulled cable or a failed switch port
 * drops them, rather than refused; it is restored by taking the link up again.
 *
 * Everything is made with iproute2 (`ip netns`, `ip link`, `ip addr`) and needs root. Names carry this
 * process's id and the network's third octet is picked free, so test files running at once do not clash; all
 * of it is removed when the test ends (and, should the test process die first, when it exits).
 */

export const IP = '/usr/sbin/ip';

function ip(args: string[]): SpawnSyncReturns<string> {
  return spawnSync(IP, args, { encoding: 'utf8' });
}

function must(args: string[]): void {
  const r = ip(args);
  if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim() || r.error?.message}`);
}

let probed: string | false | undefined;

/** Why hosts cannot be made here (a reason to skip with), or false. Probes once by making a namespace and a bridge. */
export function hostsUnavailable(): string | false {
  if (probed !== undefined) return probed;
  if (process.platform !== 'linux') return (probed = 'network namespaces are Linux only');
  if (process.getuid?.() !== 0) return (probed = 'network namespaces need root (ip netns add)');
  if (!fs.existsSync(IP)) return (probed = 'iproute2 (ip) is not installed (.ci/run installs it)');
  const name = `mnp${process.pid}`;
  const ns = ip(['netns', 'add', name]);
  if (ns.status !== 0) return (probed = `ip netns add failed: ${ns.stderr.trim()}`);
  ip(['netns', 'del', name]);
  const bridge = ip(['link', 'add', name, 'type', 'bridge']);
  if (bridge.status !== 0) return (probed = `ip link add type bridge failed: ${bridge.stderr.trim()}`);
  ip(['link', 'del', name]);
  return (probed = false);
}

export interface Host {
  /** The network namespace's name (`ip netns exec NAME ...`). */
  name: string;
  /** This host's address on the private network. */
  address: string;
  /**
   * Runs node with `args` inside this host (the service as `npm start` runs it, dist/src/main.js built first if
   * a source is newer, when `args` is absent) with exactly `env`. `ip netns exec` execs the command in place, so
   * the Run's pid is node's own: a signal to it reaches the service. Killed when the test ends.
   */
  start(env: Record<string, string>, args?: string[]): Run;
  /** Runs a command inside this host to its end (`ss`, ...); its output. */
  exec(command: string, args: string[]): string;
  /** Cut off: the link to the bridge goes down, and every packet to or from this host is dropped. */
  cut(): void;
  /** The link up again: its connections resume where TCP left them. */
  restore(): void;
}

export interface Hosts {
  /** The bridge's address in the root namespace: where PostgreSQL, Redis and HAProxy listen for the hosts. */
  gateway: string;
  /** The private network, e.g. 10.77.42.0/24. */
  network: string;
  hosts: Host[];
}

/** The third octet of a 10.77.x.0/24 that no interface or route here uses yet, starting from one this process picks. */
function freeNetwork(): number {
  const used = `${ip(['-4', '-o', 'addr']).stdout}\n${ip(['-4', 'route']).stdout}`;
  for (let i = 0; i < 250; i++) {
    const n = 1 + ((process.pid + i) % 250);
    if (!used.includes(`10.77.${n}.`)) return n;
  }
  throw new Error('no free 10.77.x.0/24 network');
}

/** One host per name, each in its own namespace on a fresh bridge; removed with everything run in them when the test ends. */
export function startHosts(t: TestContext, names: string[]): Hosts {
  const n = freeNetwork();
  const tag = `${process.pid}`;
  const bridge = `mnb${tag}`;
  const gateway = `10.77.${n}.1`;
  const runs: Run[] = [];
  const namespaces: string[] = [];
  const veths: string[] = [];
  const cleanUp = () => {
    for (const run of runs) if (run.child.exitCode === null && run.child.signalCode === null) run.child.kill('SIGKILL');
    // Each pair goes from this side: a namespace outlives `ip netns del` while any mount namespace made meanwhile
    // (another program's sandbox) still holds a copy of its /run/netns mount, and its pair would stay with it.
    for (const veth of veths) ip(['link', 'del', veth]);
    for (const ns of namespaces) ip(['netns', 'del', ns]);
    ip(['link', 'del', bridge]);
  };
  process.once('exit', cleanUp); // a safety net should the test process die before its hooks
  t.after(async () => {
    await Promise.all(runs.map(async (run) => {
      if (run.child.exitCode === null && run.child.signalCode === null) {
        run.child.kill('SIGKILL');
        await run.exited;
      }
    }));
    cleanUp();
    process.off('exit', cleanUp);
  });

  must(['link', 'add', bridge, 'type', 'bridge']);
  must(['addr', 'add', `${gateway}/24`, 'dev', bridge]);
  must(['link', 'set', bridge, 'up']);
  const hosts = names.map((hostName, i): Host => {
    const ns = `mn${tag}-${hostName}`;
    const veth = `mnv${tag}${i}`; // the bridge's side (at most 15 characters: IFNAMSIZ)
    const address = `10.77.${n}.${i + 2}`;
    must(['netns', 'add', ns]);
    namespaces.push(ns);
    must(['link', 'add', veth, 'type', 'veth', 'peer', 'name', 'eth0', 'netns', ns]);
    veths.push(veth);
    must(['link', 'set', veth, 'master', bridge, 'up']);
    must(['-n', ns, 'addr', 'add', `${address}/24`, 'dev', 'eth0']);
    must(['-n', ns, 'link', 'set', 'eth0', 'up']);
    must(['-n', ns, 'link', 'set', 'lo', 'up']);
    must(['-n', ns, 'route', 'add', 'default', 'via', gateway]);
    return {
      name: ns,
      address,
      start(env, args) {
        if (!args) ensureBuilt();
        const run = startProcess(t, env, IP, ['netns', 'exec', ns, process.execPath, ...(args ?? ['dist/src/main.js'])]);
        runs.push(run);
        return run;
      },
      exec(command, args) {
        const r = ip(['netns', 'exec', ns, command, ...args]);
        if (r.status !== 0) throw new Error(`${command} in ${ns}: ${r.stderr.trim()}`);
        return r.stdout;
      },
      cut: () => must(['link', 'set', veth, 'down']),
      restore: () => must(['link', 'set', veth, 'up']),
    };
  });
  return { gateway, network: `10.77.${n}.0/24`, hosts };
}
