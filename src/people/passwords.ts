import crypto from 'node:crypto';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
import { projectPath } from '../platform/config.ts';
import { failUntil, ok, type Result } from '../platform/failure.ts';

/**
 * bcrypt for human passwords, in a pool of worker threads: bcryptjs's async mode still blocks the
 * event loop in 100 ms slices, and a burst of logins must never stall MQTT keepalives.
 * What gets hashed is the client's password_hash (hex SHA-256 of the password), never a plaintext.
 * The queue is bounded (`maxQueue` waiting jobs): past it a job fails at once as `service_busy` with an
 * estimate of when the queue will have drained, rather than waiting minutes behind a flood.
 */
export interface PasswordHasher {
  hash(secret: string): Promise<Result<string>>;
  /**
   * Compares against `hash`; with `null` it runs a dummy comparison so unknown accounts cost the same time.
   * The dummy goes through the same bounded queue: being busy must not tell an unknown account from a known one.
   */
  verify(secret: string, hash: string | null): Promise<Result<boolean>>;
  close(): Promise<void>;
}

type Task = { id: number; op: 'hash' | 'compare'; secret: string; hash?: string; cost?: number; startedAt?: number };
type Pending = { task: Task; resolve: (v: string | boolean) => void; reject: (e: Error) => void };

export const DEFAULT_MAX_QUEUE = 64;
/**
 * A worker thread is a whole V8 isolate (~10 MiB of RSS each): started when a job needs one and
 * ended after this long without work, so a service nobody signs in to holds none.
 */
export const WORKER_IDLE_MS = 60_000;

export async function createPasswordHasher(opts: { cost: number; threads?: number; maxQueue?: number; idleMs?: number }): Promise<PasswordHasher> {
  const maxQueue = opts.maxQueue ?? DEFAULT_MAX_QUEUE;
  const size = Math.max(1, opts.threads ?? Math.min(2, os.availableParallelism()));
  const workers: Worker[] = [];
  const idle: Worker[] = [];
  const queue: Pending[] = [];
  const running = new Map<number, Pending>();
  let nextId = 1;
  let closed = false;
  // A moving average of one job's duration, for Retry-After.
  let averageMs = 0;

  const idleTimers = new Map<Worker, NodeJS.Timeout>();
  const dispatch = () => {
    while (queue.length > 0 && (idle.length > 0 || workers.length < size)) {
      const worker = idle.pop() ?? spawn();
      clearTimeout(idleTimers.get(worker));
      const job = queue.shift()!;
      running.set(job.task.id, job);
      worker.ref();
      job.task.startedAt = performance.now();
      worker.postMessage(job.task);
    }
  };

  /** Ends a worker that stayed idle for idleMs; the next job starts another. */
  const retireLater = (worker: Worker) => {
    const timer = setTimeout(() => {
      idleTimers.delete(worker);
      if (closed || !idle.includes(worker)) return;
      idle.splice(idle.indexOf(worker), 1);
      workers.splice(workers.indexOf(worker), 1);
      void worker.terminate();
    }, opts.idleMs ?? WORKER_IDLE_MS);
    timer.unref();
    idleTimers.set(worker, timer);
  };

  function spawn(): Worker {
    const worker = new Worker(projectPath('src/people/bcrypt-worker.mjs'));
    worker.on('message', (msg: { id: number; result?: string | boolean; error?: string }) => {
      const job = running.get(msg.id);
      running.delete(msg.id);
      worker.unref();
      idle.push(worker);
      retireLater(worker);
      if (job) {
        const took = performance.now() - (job.task.startedAt ?? performance.now());
        averageMs = averageMs === 0 ? took : averageMs * 0.8 + took * 0.2;
        if (msg.error !== undefined) job.reject(new Error(`bcrypt: ${msg.error}`));
        else job.resolve(msg.result!);
      }
      dispatch();
    });
    worker.on('error', (err) => {
      for (const job of running.values()) job.reject(err);
      running.clear();
    });
    worker.unref();
    workers.push(worker);
    return worker;
  }

  const run = (task: Omit<Task, 'id'>) =>
    new Promise<string | boolean>((resolve, reject) => {
      if (closed) return reject(new Error('password hasher is closed'));
      queue.push({ task: { ...task, id: nextId++ }, resolve, reject });
      dispatch();
    });

  /** Seconds until the jobs ahead of a new one are done, at the measured pace. */
  const drainSeconds = () => ((queue.length + running.size) * averageMs) / size / 1000;

  // A well-formed hash of the configured cost with a random salt and digest: comparing against it costs what
  // a real comparison costs (bcrypt derives from the salt and cost, then compares), and no worker is needed to
  // make it at start (an idle service holds no worker thread).
  const BCRYPT_BASE64 = './ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
  const dummyHash = `$2b$${String(opts.cost).padStart(2, '0')}$${[...crypto.randomBytes(53)].map((b) => BCRYPT_BASE64[b & 63]).join('')}`;

  return {
    async hash(secret) {
      if (queue.length >= maxQueue) return failUntil('service_busy', drainSeconds());
      return ok((await run({ op: 'hash', secret, cost: opts.cost })) as string);
    },
    async verify(secret, hash) {
      if (queue.length >= maxQueue) return failUntil('service_busy', drainSeconds());
      const matched = (await run({ op: 'compare', secret, hash: hash ?? dummyHash })) as boolean;
      return ok(hash !== null && matched);
    },
    close: async () => {
      closed = true;
      for (const timer of idleTimers.values()) clearTimeout(timer);
      for (const job of queue.splice(0)) job.reject(new Error('password hasher is closed'));
      // An idle worker is unref'd: ref it while it ends, or a process with nothing else left would drain its
      // event loop before the exit came (a stop that never finishes; seen as cancelled tests under load).
      await Promise.all(workers.map((w) => { w.ref(); return w.terminate(); }));
    },
  };
}
