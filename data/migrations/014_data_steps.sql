-- Steps of a schema change that SQL cannot express, written in TypeScript and run at start after the SQL
-- migrations (src/platform/db.ts runDataStepOnce): one row per step that has run on this database, written
-- in the same transaction as the step, so each runs once even when several processes start on one file.
-- The first is 'normalize-identifiers' (src/people/identifier-migration.ts): stored emails and phones
-- rewritten to the normal form of docs/api.md#identifiers.
CREATE TABLE data_steps (
  name       TEXT PRIMARY KEY,
  applied_at INTEGER NOT NULL          -- Unix seconds
);
