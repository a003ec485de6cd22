import type { TestContext } from 'node:test';
import { postgresInstalled, startPostgres } from './postgres.ts';
import { hostsUnavailable, startHosts, type Host } from './hosts.ts';
import { haproxyInstalled } from './balancer.ts';
import { durableFiles, TEST_JWT_SECRET } from '../support/service.ts';
import { baseEnv } from '../support/process.ts';
import { redisInstalled, startRedis } from '../support/redis.ts';

/**
 * The deployment the tests of several hosts share (docs/operator.md, "Several hosts"): a host per node (a network
 * namespace on a bridge, test/platform/hosts.ts), and one PostgreSQL and one Redis listening on the bridge's
 * address, as a deployment's engines sit on hosts of their own.
 */

/** Why these tests cannot run here, or false. */
export const deploymentSkip = (): string | false =>
  !postgresInstalled() ? 'PostgreSQL 15 or newer is not installed (.ci/run installs it)'
    : !redisInstalled() ? 'redis-server is not installed'
    : !haproxyInstalled() ? 'haproxy is not installed (.ci/run installs it)'
    : hostsUnavailable();

/** A node's settings on its host: its own address, the ports the compose file gives it. */
export const nodeEnv = (host: Host, dir: string, shared: Record<string, string>) =>
  baseEnv(dir, { ...shared, HOST: host.address, HTTP_PORT: '8080', MQTT_PORT: '1883', JWT_SECRET: TEST_JWT_SECRET, LOG_LEVEL: 'info' });

/** A node's addresses as the balancer's configuration names them. */
export const backend = (host: Host) => ({ http: `${host.address}:8080`, mqtt: `${host.address}:1883`, mqtts: `${host.address}:8883` });

/**
 * Two hosts, PostgreSQL and Redis, all stopped when the test ends. `shared`: the settings every node has (one
 * DATA_DIR for all, so the same lease key and Web Push keys, as the docs tell each node to have); `localDatabaseUrl`:
 * this side's own way into PostgreSQL, which outlives the bridge at the end.
 */
export async function startDeployment(t: TestContext, label: string) {
  const { gateway, network, hosts } = startHosts(t, ['a', 'b']);
  const cluster = await startPostgres({ listen: { address: gateway, allow: network } });
  t.after(() => cluster.stop());
  const redis = await startRedis(undefined, gateway);
  t.after(() => redis.stop());
  const files = durableFiles(t, label);
  const shared = { DATABASE_URL: await cluster.database(), REDIS_URL: redis.url, DATA_DIR: files.dir, DATABASE_PATH: files.env.DATABASE_PATH };
  return { hosts: hosts as [Host, Host], files, shared, localDatabaseUrl: shared.DATABASE_URL.replace(gateway, '127.0.0.1') };
}
