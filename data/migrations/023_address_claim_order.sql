-- When each address was claimed (docs/api.md, "Addresses: claims and proof"): claims of one address are ordered by
-- when the claim was made, not by the account's age, so an old account that claims an address today queues behind
-- the invitation and the person who claimed it yesterday. One number space for emails and phones, taken as the
-- largest number yet plus one by the write that makes the claim; existing claims keep their account's order.
ALTER TABLE users ADD COLUMN email_claim_order INTEGER NOT NULL DEFAULT 0;
ALTER TABLE users ADD COLUMN phone_claim_order INTEGER NOT NULL DEFAULT 0;
UPDATE users SET email_claim_order = claim_seq, phone_claim_order = claim_seq;
CREATE INDEX users_email_claim_order ON users (email_claim_order);
CREATE INDEX users_phone_claim_order ON users (phone_claim_order);
