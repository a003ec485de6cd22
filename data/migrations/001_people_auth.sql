-- People and their credentials. Times are Unix seconds.
CREATE TABLE users (
  id              TEXT PRIMARY KEY,
  email           TEXT NOT NULL UNIQUE,          -- normalised; phone-only accounts get phone-<hex>@phone.invalid
  email_hash      TEXT NOT NULL UNIQUE,          -- hex SHA-256 of the normalised email (identifier_hash)
  phone           TEXT UNIQUE,                   -- E.164
  phone_hash      TEXT UNIQUE,                   -- hex SHA-256 of the E.164 phone (identifier_hash)
  password_bcrypt TEXT,                          -- bcrypt of the client's password_hash; NULL: code login only
  role            TEXT NOT NULL CHECK (role IN ('member', 'superadmin')),
  token_version   INTEGER NOT NULL DEFAULT 0,    -- raised to revoke every older access token
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL
);

-- One outstanding login code per user: a new request replaces the old one.
CREATE TABLE login_codes (
  user_id       TEXT PRIMARY KEY REFERENCES users(id) ON DELETE CASCADE,
  code_hmac     TEXT NOT NULL,                   -- HMAC-SHA256(server key, code), never the code
  attempts_left INTEGER NOT NULL,
  expires_at    INTEGER NOT NULL
);

-- Password reset tokens (kind 'member' by forgot-password, 'superadmin' by superadmin-forgot/verify).
CREATE TABLE reset_tokens (
  token_hmac TEXT PRIMARY KEY,                   -- HMAC-SHA256(server key, token)
  user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  kind       TEXT NOT NULL CHECK (kind IN ('member', 'superadmin')),
  expires_at INTEGER NOT NULL
);
CREATE INDEX reset_tokens_user ON reset_tokens(user_id, kind);

-- Superadmin two-step sessions: purpose 'login' (superadmin-2fa) or 'reset' (superadmin-forgot).
CREATE TABLE superadmin_sessions (
  session_hash  TEXT PRIMARY KEY,                -- hex SHA-256 of session_token
  user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  purpose       TEXT NOT NULL CHECK (purpose IN ('login', 'reset')),
  otp_sealed    TEXT NOT NULL,                   -- the OTP, AES-256-GCM under a key derived from session_token
  attempts_left INTEGER NOT NULL,
  expires_at    INTEGER NOT NULL
);
CREATE UNIQUE INDEX superadmin_sessions_one_pending ON superadmin_sessions(user_id, purpose);
