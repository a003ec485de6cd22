-- The azaan schedule (docs/schedule.md). A mosque's times are derived from these fields each time they are needed;
-- only a slot's outcome is stored (schedule_slots), so a change of times recomputes only future slots.
ALTER TABLE mosques ADD COLUMN latitude REAL;
ALTER TABLE mosques ADD COLUMN longitude REAL;
ALTER TABLE mosques ADD COLUMN prayer_times TEXT;                 -- JSON {method, madhab, high_latitude_rule?, fajr_angle?, isha_angle?, adjustments?}
ALTER TABLE mosques ADD COLUMN azaan TEXT NOT NULL DEFAULT '{}';  -- JSON per prayer: {offset_minutes} | {fixed: "HH:MM"}
ALTER TABLE mosques ADD COLUMN iqamah TEXT NOT NULL DEFAULT '{}'; -- JSON per prayer: {after_minutes} | {fixed: "HH:MM"}
ALTER TABLE mosques ADD COLUMN jumuah TEXT NOT NULL DEFAULT '[]'; -- JSON list of "HH:MM" replacing Dhuhr on Fridays
ALTER TABLE mosques ADD COLUMN auto_start INTEGER NOT NULL DEFAULT 0 CHECK (auto_start IN (0, 1));
-- When the schedule fields last changed: no check or alert is run for an event before it (a mosque set up at
-- 15:00 is not told that its Fajr and Dhuhr were missed).
ALTER TABLE mosques ADD COLUMN schedule_since INTEGER;

-- An uploaded month (Mawaqit's calendar: month 1..12, recurring every year), local times without daylight saving.
CREATE TABLE schedule_timetables (
  mosque_id TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  month     INTEGER NOT NULL CHECK (month BETWEEN 1 AND 12),
  day       INTEGER NOT NULL CHECK (day BETWEEN 1 AND 31),
  fajr      TEXT NOT NULL,
  shuruk    TEXT,
  dhuhr     TEXT NOT NULL,
  asr       TEXT NOT NULL,
  maghrib   TEXT NOT NULL,
  isha      TEXT NOT NULL,
  PRIMARY KEY (mosque_id, month, day)
);

-- The outcome of a slot, once it has one. The key is the slot's identity: nothing fires twice for it.
CREATE TABLE schedule_slots (
  mosque_id    TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  date         TEXT NOT NULL,          -- the mosque's calendar date, YYYY-MM-DD
  prayer       TEXT NOT NULL,
  idx          INTEGER NOT NULL,       -- 0, or the Jumu'ah time's position
  starts_at    INTEGER NOT NULL,       -- the times as they were when the outcome was recorded (Unix seconds)
  azaan_at     INTEGER NOT NULL,
  iqamah_at    INTEGER,
  source       TEXT NOT NULL,
  status       TEXT NOT NULL CHECK (status IN ('ready', 'not_ready', 'live', 'done', 'missed')),
  reason       TEXT,
  readiness    TEXT,                   -- JSON: transmitters and leased players at the check
  broadcast_id TEXT,
  auto_started INTEGER NOT NULL DEFAULT 0 CHECK (auto_started IN (0, 1)),
  updated_at   INTEGER NOT NULL,
  PRIMARY KEY (mosque_id, date, prayer, idx)
);
CREATE INDEX schedule_slots_broadcast ON schedule_slots(broadcast_id);

-- One row per alert sent: insert-or-ignore is the deduplication (one message per slot and kind).
CREATE TABLE schedule_alerts (
  mosque_id TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  date      TEXT NOT NULL,
  prayer    TEXT NOT NULL,
  idx       INTEGER NOT NULL,
  kind      TEXT NOT NULL CHECK (kind IN ('azaan_not_ready', 'azaan_missed')),
  sent_at   INTEGER NOT NULL,
  PRIMARY KEY (mosque_id, date, prayer, idx, kind)
);
