-- The browser console's sessions (docs/api.md "Console sessions"): an HttpOnly cookie names one row, and the page
-- trades it for short-lived access tokens. The cookie is `<id>.<secret>`; only a SHA-256 of the 256-bit secret is
-- kept, so a copy of the database opens no session. A session lives while its user's token_version is the one it
-- was opened under (a password change or reset, a role or email change, sign out everywhere raise it), until
-- idle or absolute expiry, or until signed out; a deleted user takes its rows along.
CREATE TABLE console_sessions (
  id            TEXT PRIMARY KEY,                                    -- random, public: minted tokens carry it as `sid`
  secret_hash   TEXT NOT NULL,                                       -- hex SHA-256 of the cookie's secret, never the secret
  user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  token_version INTEGER NOT NULL,                                    -- users.token_version when opened
  created_at    INTEGER NOT NULL,
  last_used_at  INTEGER NOT NULL,
  expires_at    INTEGER NOT NULL                                     -- absolute end, Unix seconds
);
CREATE INDEX console_sessions_user ON console_sessions(user_id, last_used_at);
CREATE INDEX console_sessions_expiry ON console_sessions(expires_at);
