-- PostgreSQL's form of 013 (docs/architecture.md, "Migrations"): the same schema, reached with ALTER TABLE where
-- SQLite must rebuild a table (PostgreSQL drops a UNIQUE constraint and a NOT NULL in place).
ALTER TABLE users DROP CONSTRAINT users_email_key;
ALTER TABLE users DROP CONSTRAINT users_email_hash_key;
ALTER TABLE users DROP CONSTRAINT users_phone_key;
ALTER TABLE users DROP CONSTRAINT users_phone_hash_key;
ALTER TABLE users ADD COLUMN email_proven_at BIGINT;
ALTER TABLE users ADD COLUMN phone_proven_at BIGINT;
ALTER TABLE users ADD COLUMN used_unproven BIGINT NOT NULL DEFAULT 0;
UPDATE users SET email_proven_at = CASE WHEN email LIKE '%@phone.invalid' THEN NULL ELSE updated_at END,
                 phone_proven_at = CASE WHEN phone IS NULL THEN NULL ELSE updated_at END;
CREATE UNIQUE INDEX users_proven_email ON users(email_hash) WHERE email_proven_at IS NOT NULL;
CREATE UNIQUE INDEX users_proven_phone ON users(phone_hash) WHERE phone_proven_at IS NOT NULL;
CREATE INDEX users_email_claims ON users(email_hash, created_at);
CREATE INDEX users_phone_claims ON users(phone_hash, created_at);

ALTER TABLE login_codes ADD COLUMN sent_to_hash TEXT;
ALTER TABLE reset_tokens ADD COLUMN sent_to_hash TEXT;

CREATE TABLE signup_notices (
  address_hash TEXT PRIMARY KEY,
  sent_at      BIGINT NOT NULL
);

CREATE TABLE address_grants (
  id           TEXT PRIMARY KEY,
  mosque_id    TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  address_hash TEXT NOT NULL,
  kind         TEXT NOT NULL CHECK (kind IN ('membership', 'admin', 'owner')),
  status       TEXT CHECK (status IN ('pending', 'approved')),
  can_trigger  BIGINT NOT NULL DEFAULT 0,
  can_manage   BIGINT NOT NULL DEFAULT 0,
  invite_id    TEXT,
  granted_by   TEXT REFERENCES users(id) ON DELETE SET NULL,
  created_at   BIGINT NOT NULL
);
CREATE INDEX address_grants_address ON address_grants(address_hash);
CREATE INDEX address_grants_mosque ON address_grants(mosque_id);

ALTER TABLE invites ALTER COLUMN user_id DROP NOT NULL;

ALTER TABLE membership_removals ADD COLUMN by_self BIGINT NOT NULL DEFAULT 0;
