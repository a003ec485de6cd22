-- Access tokens signed out one at a time (POST /auth/logout, docs/api.md "Signing out"). Every other way of
-- ending tokens raises users.token_version instead; a single token needs a row of its own. Kept until the
-- token's own expiry (after which it is refused anyway), then pruned. Every process holds these rows in
-- memory and checks each request against that, never with a query (src/people/revoked-tokens.ts).
CREATE TABLE revoked_tokens (
  token_id_hash TEXT PRIMARY KEY,                                    -- hex SHA-256 of the token's jti
  user_id       TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  expires_at    INTEGER NOT NULL                                     -- the token's exp, Unix seconds
);
CREATE INDEX revoked_tokens_expiry ON revoked_tokens(expires_at);
CREATE INDEX revoked_tokens_user ON revoked_tokens(user_id);
