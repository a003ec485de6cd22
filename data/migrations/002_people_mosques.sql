-- Mosques, who administers them, who belongs to them, and what happened there.
CREATE TABLE mosques (
  id                   TEXT PRIMARY KEY,
  name                 TEXT NOT NULL,
  timezone             TEXT NOT NULL DEFAULT 'UTC',
  auto_approve_members INTEGER NOT NULL DEFAULT 0 CHECK (auto_approve_members IN (0, 1)),
  stream_url           TEXT,
  join_code            TEXT NOT NULL UNIQUE,
  created_at           INTEGER NOT NULL,
  updated_at           INTEGER NOT NULL
);

-- One row per user per mosque (docs/api.md, "Flags decide").
CREATE TABLE mosque_admins (
  mosque_id   TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id     TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  is_owner    INTEGER NOT NULL DEFAULT 0 CHECK (is_owner IN (0, 1)),
  can_trigger INTEGER NOT NULL DEFAULT 0 CHECK (can_trigger IN (0, 1)),
  can_manage  INTEGER NOT NULL DEFAULT 0 CHECK (can_manage IN (0, 1)),
  created_at  INTEGER NOT NULL,
  updated_at  INTEGER NOT NULL,
  PRIMARY KEY (mosque_id, user_id)
);
CREATE INDEX mosque_admins_user ON mosque_admins(user_id);
-- A mosque has at most one owner.
CREATE UNIQUE INDEX mosque_admins_one_owner ON mosque_admins(mosque_id) WHERE is_owner = 1;

CREATE TABLE memberships (
  id                  TEXT PRIMARY KEY,
  mosque_id           TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id             TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  status              TEXT NOT NULL CHECK (status IN ('pending', 'approved', 'rejected', 'banned')),
  notify_azaan        INTEGER NOT NULL DEFAULT 1 CHECK (notify_azaan IN (0, 1)),
  notify_jummah       INTEGER NOT NULL DEFAULT 1 CHECK (notify_jummah IN (0, 1)),
  notify_waaz         INTEGER NOT NULL DEFAULT 1 CHECK (notify_waaz IN (0, 1)),
  notify_announcement INTEGER NOT NULL DEFAULT 1 CHECK (notify_announcement IN (0, 1)),
  created_at          INTEGER NOT NULL,
  updated_at          INTEGER NOT NULL,
  UNIQUE (mosque_id, user_id)
);
CREATE INDEX memberships_user ON memberships(user_id);
CREATE INDEX memberships_mosque_status ON memberships(mosque_id, status);

CREATE TABLE invites (
  id           TEXT PRIMARY KEY,
  mosque_id    TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id      TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  invited_by   TEXT REFERENCES users(id) ON DELETE SET NULL,
  channel      TEXT NOT NULL CHECK (channel IN ('email', 'whatsapp')),
  contact      TEXT NOT NULL,
  auto_approve INTEGER NOT NULL CHECK (auto_approve IN (0, 1)),
  created_at   INTEGER NOT NULL
);
CREATE INDEX invites_mosque ON invites(mosque_id);

CREATE TABLE broadcasts (
  id         TEXT PRIMARY KEY,
  mosque_id  TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  kind       TEXT NOT NULL CHECK (kind IN ('azaan', 'jummah', 'waaz', 'announcement')),
  prayer     TEXT,
  title      TEXT,
  status     TEXT NOT NULL CHECK (status IN ('live', 'stopped')),
  started_by TEXT REFERENCES users(id) ON DELETE SET NULL,
  started_at INTEGER NOT NULL,
  stopped_by TEXT REFERENCES users(id) ON DELETE SET NULL,
  stopped_at INTEGER                     -- the delivery report is read from the device timeline
);
CREATE INDEX broadcasts_mosque ON broadcasts(mosque_id, started_at DESC);
CREATE UNIQUE INDEX broadcasts_one_live ON broadcasts(mosque_id) WHERE status = 'live';

-- The per-mosque activity feed; the integer id is the paging cursor. Written in the same transaction
-- as the change it records.
CREATE TABLE activity (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  mosque_id     TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  at            INTEGER NOT NULL,
  actor_user_id TEXT REFERENCES users(id) ON DELETE SET NULL,
  kind          TEXT NOT NULL,
  subject_id    TEXT,
  data          TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX activity_mosque ON activity(mosque_id, id);

CREATE TABLE push_subscriptions (
  endpoint   TEXT PRIMARY KEY,
  user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  p256dh     TEXT NOT NULL,
  auth       TEXT NOT NULL,
  created_at INTEGER NOT NULL
);
CREATE INDEX push_subscriptions_user ON push_subscriptions(user_id);
