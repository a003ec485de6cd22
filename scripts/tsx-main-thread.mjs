// `node --import ./scripts/tsx-main-thread.mjs file.ts`: tsx for the main thread only (scripts/test.ts runs each
// test file so). A worker thread inherits its parent's --import, and tsx costs a worker ~80 ms of CPU to load;
// the service's workers (src/people/bcrypt-worker.mjs, the WAL checkpointer) are plain JavaScript and need none.
import { isMainThread } from 'node:worker_threads';

if (isMainThread) await import('tsx');
