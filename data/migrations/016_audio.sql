-- The audio path (docs/operator.md#audio-icecast): what Icecast told Minaret through its URL authentication.
-- Owned by src/audio/. Device and user ids carry no foreign key: who heard a broadcast stays in its history
-- after the device or the account is deleted. A mosque's audio history goes with the mosque.

-- One admitted listener of a mount, from listener_add to listener_remove (or its removal by Minaret).
CREATE TABLE audio_listener_sessions (
  id          TEXT PRIMARY KEY,
  mosque_id   TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  client_id   INTEGER NOT NULL,                      -- Icecast's client id: `ID` of /admin/listclients, `id` of /admin/killclient
  device_id   TEXT,                                  -- a stream player admitted by its lease
  user_id     TEXT,                                  -- a member admitted by a console listen ticket
  ip          TEXT,
  started_at  INTEGER NOT NULL,                      -- Unix seconds
  ended_at    INTEGER,                               -- null while listening
  seconds     INTEGER,                               -- Icecast's `duration` when it said, else ended_at - started_at
  bytes       INTEGER,                               -- when Icecast says (2.4.4's listener_remove does not)
  end_reason  TEXT CHECK (end_reason IN ('left', 'revoked', 'reconciled', 'replaced')),
  CHECK ((device_id IS NULL) <> (user_id IS NULL))
);
CREATE INDEX audio_sessions_open ON audio_listener_sessions(mosque_id, client_id) WHERE ended_at IS NULL;
CREATE INDEX audio_sessions_device ON audio_listener_sessions(device_id) WHERE ended_at IS NULL;
CREATE INDEX audio_sessions_user ON audio_listener_sessions(user_id) WHERE ended_at IS NULL;
CREATE INDEX audio_sessions_started ON audio_listener_sessions(mosque_id, started_at);

-- A listener or source Icecast asked about and Minaret refused, and why (who, when the lease named them).
CREATE TABLE audio_refusals (
  mosque_id  TEXT,                                   -- null when the mount names no mosque
  kind       TEXT NOT NULL CHECK (kind IN ('listener', 'source')),
  reason     TEXT NOT NULL,
  device_id  TEXT,
  user_id    TEXT,
  at         INTEGER NOT NULL
);
CREATE INDEX audio_refusals_mosque ON audio_refusals(mosque_id, at);
CREATE INDEX audio_refusals_at ON audio_refusals(at);

-- When a mosque's mount had a live source: mount_add opens an interval, mount_remove closes it.
CREATE TABLE audio_on_air (
  id          TEXT PRIMARY KEY,
  mosque_id   TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  device_id   TEXT,                                  -- the transmitter stream_auth admitted, when known
  started_at  INTEGER NOT NULL,
  ended_at    INTEGER,
  end_reason  TEXT CHECK (end_reason IN ('source_left', 'reconciled'))
);
CREATE UNIQUE INDEX audio_on_air_open ON audio_on_air(mosque_id) WHERE ended_at IS NULL;
CREATE INDEX audio_on_air_started ON audio_on_air(mosque_id, started_at);
