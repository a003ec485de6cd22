-- Wrong guesses of short secrets (login codes, superadmin OTP digests), per account and flow, for the hourly
-- cap: a fresh code must not bring fresh guesses. No foreign key: an unknown identifier is counted too (by its
-- identifier_hash), so the cap answers the same whether or not the account exists. Rows older than an hour
-- are pruned.
CREATE TABLE wrong_guesses (
  subject TEXT NOT NULL,      -- "<flow>:<user id>" or "<flow>:?<identifier_hash>" when no such account
  at      INTEGER NOT NULL    -- Unix seconds
);
CREATE INDEX wrong_guesses_subject ON wrong_guesses(subject, at);
CREATE INDEX wrong_guesses_at ON wrong_guesses(at);

-- The decoy sessions superadmin-forgot hands out for identifiers that are no superadmin. They are kept (as
-- hashes, like real sessions) so a guess against one is counted and answered exactly as against a real one:
-- otherwise the hourly cap would answer 429 only for real superadmins and name them.
CREATE TABLE superadmin_decoy_sessions (
  session_hash    TEXT PRIMARY KEY,         -- hex SHA-256 of session_token
  identifier_hash TEXT NOT NULL UNIQUE,     -- a newer decoy for the same identifier supersedes the older one
  attempts_left   INTEGER NOT NULL,
  expires_at      INTEGER NOT NULL
);
CREATE INDEX superadmin_decoy_sessions_expiry ON superadmin_decoy_sessions(expires_at);
