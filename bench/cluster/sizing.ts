/**
 * A sizing table for a fleet of players, calculated from the fleet bench's measured CPU per message: not
 * measured at that size. Each limit turns a CPU cost per device into devices per core for a budget of CPU
 * time; the smallest (the binding one) sizes the nodes and the PostgreSQL server.
 */
import { fmt } from '../support.ts';

/** Measured costs, µs of CPU per message, the worst round's (the highest). */
export interface Costs {
  /** Services (all nodes) and PostgreSQL per heartbeat and per status. */
  heartbeat: { service: number; postgres: number };
  status: { service: number; postgres: number };
  /** Per player in the azaan minute (scheduler, start, fan-out, stop not included). */
  minute: { service: number; postgres: number };
  /** Per device of the reconnect storm (CONNECT, config with lease, SUBSCRIBEs, status, heartbeat). */
  storm: { service: number; postgres: number };
}

/** What a player does (docs/walkthrough.md: a player's heartbeat_secs is 300) and the budgets the table assumes. */
export const PLAN = {
  heartbeatS: 300,
  /** A status on each start and stop of the five daily azaans, and a few more (reconnects, volume changes). */
  statusesPerDay: 12,
  /** Steady load may take half a core: the rest is headroom for the minute and the storm. */
  steadyShare: 0.5,
  /** Every player's start within this much CPU time per core (a core's players all hear it within ~5 s). */
  minuteBudgetS: 5,
  /** A crashed node's players all back within this much CPU time per core of the node that takes them. */
  stormBudgetS: 60,
  /** MQTT_MAX_CONNECTIONS' default, and the open-file limit of this host. */
  connectionsPerNode: 20_000,
  coresPerNode: 2,
};

export function sizingTable(c: Costs, fleet: number): string[] {
  const steady = (x: { heartbeat: number; status: number }) => x.heartbeat / PLAN.heartbeatS + (x.status * PLAN.statusesPerDay) / 86_400; // µs per device per s
  const perCore = (usPerDevice: number, budgetS: number) => Math.floor((budgetS * 1e6) / usPerDevice);
  const limits = [
    {
      name: `Steady: a heartbeat every ${PLAN.heartbeatS} s, ${PLAN.statusesPerDay} statuses a day`,
      formula: `${PLAN.steadyShare} s / (heartbeat / ${PLAN.heartbeatS} + status × ${PLAN.statusesPerDay} / 86,400)`,
      service: perCore(steady({ heartbeat: c.heartbeat.service, status: c.status.service }), PLAN.steadyShare),
      postgres: perCore(steady({ heartbeat: c.heartbeat.postgres, status: c.status.postgres }), PLAN.steadyShare),
      costs: `${fmt(c.heartbeat.service, 1)} / ${fmt(c.status.service, 0)} µs; PostgreSQL ${fmt(c.heartbeat.postgres, 1)} / ${fmt(c.status.postgres, 0)} µs`,
    },
    {
      name: `The azaan minute: every start delivered within ${PLAN.minuteBudgetS} s of a core's CPU`,
      formula: `${PLAN.minuteBudgetS} s / CPU per player of the minute`,
      service: perCore(c.minute.service, PLAN.minuteBudgetS),
      postgres: perCore(c.minute.postgres, PLAN.minuteBudgetS),
      costs: `${fmt(c.minute.service, 1)} µs; PostgreSQL ${fmt(c.minute.postgres, 1)} µs`,
    },
    {
      name: `The reconnect storm: a node's players all back within ${PLAN.stormBudgetS} s of a core's CPU`,
      formula: `${PLAN.stormBudgetS} s / CPU per reconnecting device`,
      service: perCore(c.storm.service, PLAN.stormBudgetS),
      postgres: perCore(c.storm.postgres, PLAN.stormBudgetS),
      costs: `${fmt(c.storm.service, 0)} µs; PostgreSQL ${fmt(c.storm.postgres, 0)} µs`,
    },
  ];
  const serviceCore = Math.min(...limits.map((l) => l.service));
  const pgCore = Math.min(...limits.map((l) => l.postgres));
  const perNode = Math.min(PLAN.connectionsPerNode, serviceCore * PLAN.coresPerNode);
  const n = (x: number) => x.toLocaleString('en-US');
  const L = [
    `**Sizing for ${n(fleet)} players: a calculation from the figures above, not a measurement at that size.** Each cost is the highest of the rounds (µs of CPU per message, PostgreSQL run); devices per core = budget / CPU per device of that budget's work; the smallest limit binds.`,
    '',
    '| Limit | Measured cost (service; PostgreSQL) | Formula | Devices per service core | Devices per PostgreSQL core |',
    '|---|---|---|---:|---:|',
    ...limits.map((l) => `| ${l.name} | ${l.costs} | ${l.formula} | ${n(l.service)} | ${n(l.postgres)} |`),
    `| **Binding** | | min of the above | **${n(serviceCore)}** | **${n(pgCore)}** |`,
    '',
    '| For the fleet | Calculation | Figure |',
    '|---|---|---:|',
    `| Devices per node (${PLAN.coresPerNode} cores) | min(${n(PLAN.connectionsPerNode)} connections (MQTT_MAX_CONNECTIONS, and this host's open-file limit), ${PLAN.coresPerNode} × ${n(serviceCore)}) | ${n(perNode)} |`,
    `| Service nodes | ⌈${n(fleet)} / ${n(perNode)}⌉, + 1 so that a crashed node's players have somewhere to go | ${n(Math.ceil(fleet / perNode) + 1)} |`,
    `| PostgreSQL cores | ⌈${n(fleet)} / ${n(pgCore)}⌉ | ${n(Math.ceil(fleet / pgCore))} |`,
    `| Devices per PostgreSQL (a ${PLAN.coresPerNode}-core server) | ${PLAN.coresPerNode} × ${n(pgCore)} | ${n(PLAN.coresPerNode * pgCore)} |`,
  ];
  return L;
}
