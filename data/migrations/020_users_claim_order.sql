-- The order in which accounts were created, for two unproven claims of one address made in the same second: the
-- first claimant is the one a sign-in reaches (docs/api.md, "Signup"). SQLite numbers rows in insertion order
-- already (rowid); the column carries that number under a name both engines have, and a trigger fills it for
-- every new row. PostgreSQL's sibling makes it an identity column, which numbers new rows the same way.
ALTER TABLE users ADD COLUMN claim_seq INTEGER NOT NULL DEFAULT 0;
UPDATE users SET claim_seq = rowid;
CREATE TRIGGER users_claim_seq AFTER INSERT ON users
BEGIN
  UPDATE users SET claim_seq = NEW.rowid WHERE rowid = NEW.rowid;
END;
