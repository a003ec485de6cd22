-- Memberships an admin removed, one row per (mosque, user), so entitlement tells "removed" (membership_lapsed)
-- from "never joined" (awaiting_approval) with one primary-key lookup instead of scanning the mosque's
-- activity feed with json_extract on every CONNECT of an unbound player (docs/decisions.md, "Removed memberships").
CREATE TABLE membership_removals (
  mosque_id  TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  removed_at INTEGER NOT NULL,
  PRIMARY KEY (mosque_id, user_id)
) WITHOUT ROWID;

-- What the feed already says, for removals whose membership was not re-created since.
INSERT OR IGNORE INTO membership_removals (mosque_id, user_id, removed_at)
SELECT a.mosque_id, json_extract(a.data, '$.user_id'), max(a.at)
FROM activity a
WHERE a.kind = 'membership.removed'
  AND EXISTS (SELECT 1 FROM users u WHERE u.id = json_extract(a.data, '$.user_id'))
  AND NOT EXISTS (SELECT 1 FROM memberships m WHERE m.mosque_id = a.mosque_id AND m.user_id = json_extract(a.data, '$.user_id'))
GROUP BY a.mosque_id, json_extract(a.data, '$.user_id');
