import crypto from 'node:crypto';
import os from 'node:os';
import { Worker } from 'node:worker_threads';
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

export async function createPasswordHasher(opts: { cost: number; threads?: number; maxQueue?: number }): Promise<PasswordHasher> {
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

  const dispatch = () => {
    while (idle.length > 0 && queue.length > 0) {
      const worker = idle.pop()!;
      const job = queue.shift()!;
      running.set(job.task.id, job);
      worker.ref();
      job.task.startedAt = performance.now();
      worker.postMessage(job.task);
    }
  };

  for (let i = 0; i < size; i++) {
    const worker = new Worker(new URL('./bcrypt-worker.mjs', import.meta.url));
    worker.on('message', (msg: { id: number; result?: string | boolean; error?: string }) => {
      const job = running.get(msg.id);
      running.delete(msg.id);
      worker.unref();
      idle.push(worker);
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
    idle.push(worker);
  }

  const run = (task: Omit<Task, 'id'>) =>
    new Promise<string | boolean>((resolve, reject) => {
      if (closed) return reject(new Error('password hasher is closed'));
      queue.push({ task: { ...task, id: nextId++ }, resolve, reject });
      dispatch();
    });

  /** Seconds until the jobs ahead of a new one are done, at the measured pace. */
  const drainSeconds = () => ((queue.length + running.size) * averageMs) / size / 1000;

  const dummyHash = (await run({ op: 'hash', secret: crypto.randomBytes(32).toString('hex'), cost: opts.cost })) as string;

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
      for (const job of queue.splice(0)) job.reject(new Error('password hasher is closed'));
      await Promise.all(workers.map((w) => w.terminate()));
    },
  };
}
