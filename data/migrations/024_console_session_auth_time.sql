-- The time of the sign-in that opened each console session (docs/api.md "Console sessions"): every token minted
-- from the session carries it as `auth_time` ([OpenID Connect Core 1.0 §2]), and the "sign-in in the last 10
-- minutes" rules read it, so a browser left signed in for days no longer passes them with a newly minted token.
-- A session opened before this column existed came from a sign-in at most 10 minutes before it was opened: the
-- earliest such time is the one that errs towards asking for a new sign-in.
ALTER TABLE console_sessions ADD COLUMN auth_time INTEGER NOT NULL DEFAULT 0;
UPDATE console_sessions SET auth_time = created_at - 600;
