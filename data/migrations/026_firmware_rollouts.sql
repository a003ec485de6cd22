-- Staged firmware rollouts (docs/api.md, "Firmware updates"): a rollout offers one image to the devices it targeted
-- when it was created, group by group; each device's offer is a row of firmware_offers, written (state 'offered')
-- by one conditional update BEFORE the update command goes out, so however many nodes run the rollout and
-- whichever of them dies, a device is asked at most once. No foreign key to the image: a finished rollout's
-- history outlives the image's deletion (the image's version and kind are copied). Only src/firmware/ names these tables.
CREATE TABLE firmware_rollouts (
  id                    TEXT PRIMARY KEY,
  image_id              TEXT NOT NULL,
  kind                  TEXT NOT NULL,
  hw_rev                TEXT NOT NULL,
  target_fw             TEXT NOT NULL,                              -- the image's version
  status                TEXT NOT NULL CHECK (status IN ('running', 'paused', 'paused_by_errors', 'cancelled', 'done')),
  mosque_ids            TEXT,                                       -- JSON array, or NULL: everywhere
  fw_range              TEXT,                                       -- semver range, or NULL: below target_fw
  groups                TEXT NOT NULL,                              -- JSON array of {size} as resolved at creation
  success_threshold_pct INTEGER NOT NULL,
  error_threshold_pct   INTEGER NOT NULL,
  max_concurrent        INTEGER NOT NULL,
  timeout_s             INTEGER NOT NULL,
  resumed_at            INTEGER,                                    -- the last resume: failures before it are accepted
  created_by            TEXT REFERENCES users(id) ON DELETE SET NULL,
  created_at            INTEGER NOT NULL,                           -- Unix seconds
  updated_at            INTEGER NOT NULL
);
CREATE INDEX firmware_rollouts_status ON firmware_rollouts(status);

CREATE TABLE firmware_offers (
  rollout_id         TEXT NOT NULL REFERENCES firmware_rollouts(id) ON DELETE CASCADE,
  device_id          TEXT NOT NULL REFERENCES devices(id) ON DELETE CASCADE,
  image_id           TEXT NOT NULL,
  group_index        INTEGER NOT NULL,
  state              TEXT NOT NULL CHECK (state IN ('waiting', 'offered', 'updating', 'succeeded', 'failed')),
  waiting_for_window INTEGER NOT NULL DEFAULT 0,                   -- 1: its turn came while its mosque's window was shut
  from_fw            TEXT,                                          -- what the device ran when targeted
  progress_pct       INTEGER,
  error              TEXT,                                          -- why it failed: timeout, rolled_back, hash_mismatch, ...
  offered_at         INTEGER,                                       -- Unix seconds; the last offer
  finished_at        INTEGER,                                       -- succeeded or failed
  updated_at         INTEGER NOT NULL,
  PRIMARY KEY (rollout_id, device_id),
  -- docs/api.md, "Firmware updates": a device is offered an image at most once, whichever rollout names it.
  UNIQUE (image_id, device_id)
);
CREATE INDEX firmware_offers_device ON firmware_offers(device_id);
