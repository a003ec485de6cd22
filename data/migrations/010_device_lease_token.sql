-- The signed lease is kept beside its expiry, so a player that reconnects (after a restart too)
-- while its lease has more than half its life left gets the same token again instead of a freshly signed
-- one and a lease write per CONNECT. Cleared with lease_expires_at when entitlement ends.
ALTER TABLE devices ADD COLUMN lease_token TEXT;
