-- PostgreSQL's form of 006 (docs/architecture.md, "Migrations"): the same table; the feed's removals read with
-- PostgreSQL's JSON operators instead of json_extract.
CREATE TABLE membership_removals (
  mosque_id  TEXT NOT NULL REFERENCES mosques(id) ON DELETE CASCADE,
  user_id    TEXT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  removed_at BIGINT NOT NULL,
  PRIMARY KEY (mosque_id, user_id)
);

INSERT INTO membership_removals (mosque_id, user_id, removed_at)
SELECT a.mosque_id, a.data::json->>'user_id', max(a.at)
FROM activity a
WHERE a.kind = 'membership.removed'
  AND EXISTS (SELECT 1 FROM users u WHERE u.id = a.data::json->>'user_id')
  AND NOT EXISTS (SELECT 1 FROM memberships m WHERE m.mosque_id = a.mosque_id AND m.user_id = a.data::json->>'user_id')
GROUP BY a.mosque_id, a.data::json->>'user_id'
ON CONFLICT DO NOTHING;
