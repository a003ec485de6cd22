/** Where the Redis-mode benches write in bench/RESULTS.md. */
export const SECTION = '## Several processes (npm run bench:cluster)';
export const SECTION_INTRO =
  '`npm run bench:cluster` (bench/cluster/): Redis mode (`REDIS_URL`) with a real redis-server on this host. Each figure beside its baseline measured in the same run; two runs, given as a range.';
/** Retained lookups, then 1 process against 2, then the fleet on PostgreSQL, then the hand-written reading (kept by reruns). */
export const subsectionOrder = (s: string) => (s.startsWith('### Retained') ? 1 : s.startsWith('### 1 process') ? 2 : s.startsWith('### A fleet') ? 3 : 4);
