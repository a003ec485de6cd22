// Runs bcrypt off the event loop (see src/people/passwords.ts). Plain JS so it loads without a TypeScript loader.
import { parentPort } from 'node:worker_threads';
import bcrypt from 'bcryptjs';

parentPort.on('message', (task) => {
  try {
    const result = task.op === 'hash' ? bcrypt.hashSync(task.secret, task.cost) : bcrypt.compareSync(task.secret, task.hash);
    parentPort.postMessage({ id: task.id, result });
  } catch (err) {
    parentPort.postMessage({ id: task.id, error: String(err && err.message) });
  }
});
