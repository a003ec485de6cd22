-- Pairing a device by a short code (docs/api.md, "Pairing a device"; RFC 8628, the OAuth 2.0 Device Authorization
-- Grant): a device asks for a pairing, shows its user code, and polls with its device code until a person approves
-- it. Both codes are kept only as HMACs under a server key (RFC 8628 §5.1, §5.2), so a copy of the database alone
-- neither finds a pending pairing's codes nor approves one. No password is kept: the device is registered at
-- approval and its password is generated when the device's poll takes it, answered once and stored as SHA-256 in
-- devices. A row lives until its device takes its credentials, or is pruned once expired.
CREATE TABLE device_pairings (
  id                TEXT PRIMARY KEY,
  device_code_hash  TEXT NOT NULL UNIQUE,                           -- hex HMAC-SHA-256 of the 256-bit device code
  user_code_hash    TEXT NOT NULL UNIQUE,                           -- hex HMAC-SHA-256 of the 8 letters, without the dash
  kind              TEXT NOT NULL CHECK (kind IN ('transmitter', 'stream_player')),
  name              TEXT,                                           -- what the device called itself; the approver's name wins
  fw                TEXT,
  hw_rev            TEXT,
  status            TEXT NOT NULL CHECK (status IN ('pending', 'approving', 'approved', 'denied')),
  device_id         TEXT,                                           -- the device registered at approval; gone: the pairing is void
  approved_by       TEXT,                                           -- the approver's user id (the timeline names them when the password is issued)
  interval_s        INTEGER NOT NULL,                               -- the least time between polls; slow_down adds 5 (RFC 8628 §3.5)
  last_poll_at      INTEGER,
  created_at        INTEGER NOT NULL,
  expires_at        INTEGER NOT NULL                                -- Unix seconds; created_at + 600
);
CREATE INDEX device_pairings_expiry ON device_pairings(expires_at);
