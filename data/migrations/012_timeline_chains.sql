-- The `(device_id, id)` index put every status transition in a random leaf page (a commit of 28
-- statuses from 28 devices wrote ~28 of them: 7.7 KiB of WAL per status, ~10 µs of its ~37 µs of CPU).
-- Each row now points to the same device's previous row (`prev_id`) and the device row to its newest
-- (`timeline_head`), so a row is an append to the end of the table. A device's page walks its chain back
-- from the head (src/devices/timeline.ts). Ids come from AUTOINCREMENT and are never reused: a pointer to a
-- pruned row ends the chain, it never leads into another device's rows.
--
-- Without the index, deleting a device cannot cascade to its rows (SQLite would scan the whole table for
-- each one), so there is no foreign key: a deleted device's head goes to device_timeline_orphans (trigger
-- below), and the timeline's upkeep pass deletes that chain.
CREATE TABLE device_events_chained (
  id            INTEGER PRIMARY KEY AUTOINCREMENT,
  device_id     TEXT NOT NULL,
  prev_id       INTEGER,
  mosque_id     TEXT,
  at            INTEGER NOT NULL,
  kind          TEXT NOT NULL,
  from_status   TEXT,
  to_status     TEXT,
  reason        TEXT,
  actor_user_id TEXT,
  detail        TEXT NOT NULL DEFAULT '{}'
);
INSERT INTO device_events_chained (id, device_id, prev_id, mosque_id, at, kind, from_status, to_status, reason, actor_user_id, detail)
  SELECT id, device_id, LAG(id) OVER (PARTITION BY device_id ORDER BY id), mosque_id, at, kind, from_status, to_status, reason, actor_user_id, detail
  FROM mosque_device_events;

-- timeline_seq counts the rows ever appended to the device's chain, and timeline_floor is the number of the
-- oldest one that may still be there: the per-device cap looks at a chain only when the two say it may be
-- over (src/devices/timeline.ts), instead of walking every chain every hour.
ALTER TABLE devices ADD COLUMN timeline_head INTEGER;
ALTER TABLE devices ADD COLUMN timeline_seq INTEGER NOT NULL DEFAULT 0;
ALTER TABLE devices ADD COLUMN timeline_floor INTEGER NOT NULL DEFAULT 1;
-- While the old index is still there to answer it per device.
UPDATE devices SET
  timeline_head = (SELECT max(id) FROM mosque_device_events e WHERE e.device_id = devices.id),
  timeline_seq = (SELECT count(*) FROM mosque_device_events e WHERE e.device_id = devices.id);

-- The old table's sequence may be past its last row (its newest rows deleted with their device): kept, so no
-- id is handed out twice.
CREATE TEMP TABLE kept_sequence AS SELECT seq FROM sqlite_sequence WHERE name = 'mosque_device_events';
DROP TABLE mosque_device_events;
ALTER TABLE device_events_chained RENAME TO mosque_device_events;
DELETE FROM sqlite_sequence WHERE name = 'mosque_device_events' AND seq < (SELECT seq FROM kept_sequence);
INSERT INTO sqlite_sequence (name, seq)
  SELECT 'mosque_device_events', seq FROM kept_sequence WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'mosque_device_events');
DROP TABLE kept_sequence;

CREATE TABLE device_timeline_orphans (head INTEGER NOT NULL);
CREATE TRIGGER devices_timeline_orphaned AFTER DELETE ON devices WHEN OLD.timeline_head IS NOT NULL
BEGIN
  INSERT INTO device_timeline_orphans (head) VALUES (OLD.timeline_head);
END;
