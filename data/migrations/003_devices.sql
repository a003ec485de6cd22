-- Devices (transmitters and stream players), their timeline and their logs. Times are Unix seconds.
CREATE TABLE devices (
  id                      TEXT PRIMARY KEY,              -- also the MQTT clientId and username (<= 23 chars for MQTT 3.1)
  kind                    TEXT NOT NULL CHECK (kind IN ('transmitter', 'stream_player')),
  name                    TEXT,
  mosque_id               TEXT REFERENCES mosques(id) ON DELETE SET NULL,
  owner_user_id           TEXT REFERENCES users(id) ON DELETE CASCADE,
  secret_hash             TEXT NOT NULL,                 -- hex SHA-256 of the 256-bit random password
  enabled                 INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
  status                  TEXT NOT NULL DEFAULT 'UNKNOWN',
  status_reason           TEXT,
  status_detail           TEXT NOT NULL DEFAULT '{}',
  status_at               INTEGER,
  last_seen_at            INTEGER,
  fw                      TEXT,
  mac                     TEXT,
  ssid                    TEXT,
  ip                      TEXT,
  rssi                    INTEGER,
  temp_c                  REAL,
  uptime_s                INTEGER,
  free_heap               INTEGER,
  volume                  INTEGER,
  reported_config_version INTEGER,
  config                  TEXT NOT NULL DEFAULT '{}',     -- desired settings: heartbeat_secs, log_enabled, volume, quiet_hours
  config_version          INTEGER NOT NULL DEFAULT 1,
  created_at              INTEGER NOT NULL,
  updated_at              INTEGER NOT NULL
);
CREATE INDEX devices_mosque ON devices(mosque_id);
CREATE INDEX devices_owner ON devices(owner_user_id);

-- The device timeline, mosque_device_events: transitions, connections, refused input, config pushes, commands.
CREATE TABLE mosque_device_events (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  device_id     TEXT NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  mosque_id     TEXT,
  at            INTEGER NOT NULL,
  kind          TEXT NOT NULL,
  from_status   TEXT,
  to_status     TEXT,
  reason        TEXT,
  actor_user_id TEXT,
  detail        TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX mosque_device_events_device ON mosque_device_events(device_id, id);
CREATE INDEX mosque_device_events_at ON mosque_device_events(at);

CREATE TABLE device_logs (
  id        INTEGER PRIMARY KEY AUTOINCREMENT,
  device_id TEXT NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  at        INTEGER NOT NULL,
  ts        INTEGER,
  level     TEXT NOT NULL,
  msg       TEXT NOT NULL
);
CREATE INDEX device_logs_device ON device_logs(device_id, id);
