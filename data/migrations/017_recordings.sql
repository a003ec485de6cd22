-- Each mosque's one recorded azaan, played to its entitled players when the live azaan is missed
-- (docs/api.md, "Recorded azaan"). The audio lives in the database, not on one host's disk, so every process
-- sharing the store serves the same file. Only src/audio/recordings.ts names this table.
CREATE TABLE recordings (
  mosque_id    TEXT PRIMARY KEY REFERENCES mosques(id) ON DELETE CASCADE,
  content_type TEXT NOT NULL,                                        -- what the download answers with, from the parsed format
  bytes        INTEGER NOT NULL CHECK (bytes > 0),
  duration_s   REAL NOT NULL CHECK (duration_s > 0),
  sha256       TEXT NOT NULL,                                        -- hex SHA-256 of data: the download's ETag
  uploaded_by  TEXT REFERENCES users(id) ON DELETE SET NULL,
  uploaded_at  INTEGER NOT NULL,                                     -- Unix seconds
  -- Last, so reading the other columns never walks the blob's overflow pages.
  data         BLOB NOT NULL CHECK (length(data) = bytes)
);
