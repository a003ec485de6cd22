-- Firmware images a superadmin uploaded, each signed offline with the operator's Ed25519 key (docs/api.md,
-- "Firmware updates"). The bytes live in the database, as the recordings do, so every process sharing the store
-- serves the same image. An image never changes: (kind, hw_rev, version) names one set of bytes for good.
-- Only src/firmware/ names this table.
CREATE TABLE firmware_images (
  id           TEXT PRIMARY KEY,
  kind         TEXT NOT NULL CHECK (kind IN ('transmitter', 'stream_player')),
  hw_rev       TEXT NOT NULL,
  version      TEXT NOT NULL,                                        -- semver
  sha256       TEXT NOT NULL,                                        -- hex SHA-256 of data: the download's ETag
  size         INTEGER NOT NULL CHECK (size > 0),
  signature    TEXT NOT NULL,                                        -- base64 Ed25519 signature of the SHA-256 digest
  notes        TEXT,                                                 -- release notes
  uploaded_by  TEXT REFERENCES users(id) ON DELETE SET NULL,
  created_at   INTEGER NOT NULL,                                     -- Unix seconds
  -- Last, so reading the other columns never walks the blob's overflow pages.
  data         BLOB NOT NULL CHECK (length(data) = size),
  UNIQUE (kind, hw_rev, version)
);
