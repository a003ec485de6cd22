-- minaret:foreign-keys-off
-- An email or phone on an account is a claim until its owner proves control of it (docs/api.md, "Addresses:
-- claims and proof"). Several accounts may claim one address; at most one holds it proven. The UNIQUE
-- constraints of 001 become partial unique indexes, which needs the table rebuilt: the runner turns foreign
-- key enforcement off for this file (the rebuild of sqlite.org/lang_altertable.html, section 7), so dropping
-- the old table does not cascade into every table that references it, and checks every reference before
-- the commit.
CREATE TABLE users_v13 (
  id              TEXT PRIMARY KEY,
  email           TEXT NOT NULL,                 -- normalised; phone-only accounts get phone-<hex>@phone.invalid
  email_hash      TEXT NOT NULL,                 -- hex SHA-256 of the normalised email (identifier_hash)
  email_proven_at INTEGER,                       -- when the account proved the email; NULL: an unproven claim
  phone           TEXT,                          -- E.164
  phone_hash      TEXT,                          -- hex SHA-256 of the E.164 phone (identifier_hash)
  phone_proven_at INTEGER,                       -- as email_proven_at
  used_unproven   INTEGER NOT NULL DEFAULT 0,    -- 1: someone signed in to it while no address of it was proven
  password_bcrypt TEXT,                          -- bcrypt of the client's password_hash; NULL: code login only
  role            TEXT NOT NULL CHECK (role IN ('member', 'superadmin')),
  token_version   INTEGER NOT NULL DEFAULT 0,    -- raised to revoke every older access token
  created_at      INTEGER NOT NULL,
  updated_at      INTEGER NOT NULL
);
-- Accounts made before claims existed keep their standing: their addresses count as proven (docs/operator.md,
-- "Upgrading"). A phone-only account's placeholder email is never an address anyone can prove.
INSERT INTO users_v13 (id, email, email_hash, email_proven_at, phone, phone_hash, phone_proven_at, used_unproven,
                       password_bcrypt, role, token_version, created_at, updated_at)
  SELECT id, email, email_hash, CASE WHEN email LIKE '%@phone.invalid' THEN NULL ELSE updated_at END,
         phone, phone_hash, CASE WHEN phone IS NULL THEN NULL ELSE updated_at END, 0,
         password_bcrypt, role, token_version, created_at, updated_at
  FROM users;
DROP TABLE users;
ALTER TABLE users_v13 RENAME TO users;
CREATE UNIQUE INDEX users_proven_email ON users(email_hash) WHERE email_proven_at IS NOT NULL;
CREATE UNIQUE INDEX users_proven_phone ON users(phone_hash) WHERE phone_proven_at IS NOT NULL;
-- The claimants of an address in the order they claimed it: the first is the one a sign-in reaches.
CREATE INDEX users_email_claims ON users(email_hash, created_at);
CREATE INDEX users_phone_claims ON users(phone_hash, created_at);

-- A login code or reset token proves the address it was sent to.
ALTER TABLE login_codes ADD COLUMN sent_to_hash TEXT;
ALTER TABLE reset_tokens ADD COLUMN sent_to_hash TEXT;

-- "Someone tried to sign up with your address": at most one message a day per address.
CREATE TABLE signup_notices (
  address_hash TEXT PRIMARY KEY,
  sent_at      INTEGER NOT NULL
) WITHOUT ROWID;

-- What is addressed to an email or phone that no account has proven waits here, on the address, and is
-- given to the first account that proves it: an invitation's membership, an admin row or a mosque's
-- ownership named by email.
CREATE TABLE address_grants (
  id           TEXT PRIMARY KEY,
  mosque_id    TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  address_hash TEXT NOT NULL,
  kind         TEXT NOT NULL CHECK (kind IN ('membership', 'admin', 'owner')),
  status       TEXT CHECK (status IN ('pending', 'approved')),   -- membership: what it becomes
  can_trigger  INTEGER NOT NULL DEFAULT 0,
  can_manage   INTEGER NOT NULL DEFAULT 0,
  invite_id    TEXT,
  granted_by   TEXT REFERENCES users(id) ON DELETE SET NULL,
  created_at   INTEGER NOT NULL
);
CREATE INDEX address_grants_address ON address_grants(address_hash);
CREATE INDEX address_grants_mosque ON address_grants(mosque_id);

-- An invitation to an address nobody has proven names no account until one proves it.
CREATE TABLE invites_v13 (
  id           TEXT PRIMARY KEY,
  mosque_id    TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id      TEXT REFERENCES users(id) ON DELETE CASCADE,
  invited_by   TEXT REFERENCES users(id) ON DELETE SET NULL,
  channel      TEXT NOT NULL CHECK (channel IN ('email', 'whatsapp')),
  contact      TEXT NOT NULL,
  auto_approve INTEGER NOT NULL CHECK (auto_approve IN (0, 1)),
  created_at   INTEGER NOT NULL
);
INSERT INTO invites_v13 SELECT id, mosque_id, user_id, invited_by, channel, contact, auto_approve, created_at FROM invites;
DROP TABLE invites;
ALTER TABLE invites_v13 RENAME TO invites;
CREATE INDEX invites_mosque ON invites(mosque_id);

-- A member who left by themselves comes back as the mosque's auto-approval says; one an admin removed asks
-- again and waits (docs/api.md, "Memberships").
ALTER TABLE membership_removals ADD COLUMN by_self INTEGER NOT NULL DEFAULT 0;
