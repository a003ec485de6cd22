-- The change log (docs/decisions.md, "The change log"): with several processes, every change the change feed
-- announces is also written here, numbered, right after the commit it follows. Redis pub/sub drops what is sent
-- while a process is away; a process back from such a gap reads the entries numbered after the last one it saw
-- instead of reloading everything. It holds what the feed holds (a kind and an id, never a value or a secret)
-- and is pruned after CHANGE_LOG_KEEP_S. One process alone (no REDIS_URL) writes nothing here.
CREATE TABLE change_log (
  seq       INTEGER PRIMARY KEY AUTOINCREMENT,   -- the number: increasing, never reused
  kind      TEXT NOT NULL,                       -- src/platform/changes.ts, ChangeKind
  entity_id TEXT NOT NULL,
  origin    TEXT NOT NULL,                       -- the writing process's id for this start (it skips its own)
  at        INTEGER NOT NULL                     -- Unix milliseconds by the writer's clock, for pruning only
);
CREATE INDEX change_log_at ON change_log(at);
