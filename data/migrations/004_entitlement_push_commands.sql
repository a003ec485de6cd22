-- Web Push deliveries of broadcasts, through a durable outbox (a restart loses none).
CREATE TABLE push_outbox (
  id              INTEGER PRIMARY KEY AUTOINCREMENT,
  broadcast_id    TEXT REFERENCES broadcasts(id) ON DELETE CASCADE,
  user_id         TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  endpoint        TEXT NOT NULL,
  payload         TEXT NOT NULL,
  status          TEXT NOT NULL CHECK (status IN ('queued', 'sent', 'failed')),
  attempts        INTEGER NOT NULL DEFAULT 0,
  next_attempt_at INTEGER NOT NULL,
  last_error      TEXT,
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL
);
CREATE INDEX push_outbox_due ON push_outbox(status, next_attempt_at);
CREATE INDEX push_outbox_broadcast ON push_outbox(broadcast_id, status);

-- Entitlement leases last issued to stream players (what the player holds, as far as the backend knows).
ALTER TABLE devices ADD COLUMN lease_expires_at INTEGER;
-- A stream player's temporary log escalation (set_log_level), with its expiry.
ALTER TABLE devices ADD COLUMN log_level TEXT;
ALTER TABLE devices ADD COLUMN log_level_until INTEGER;
