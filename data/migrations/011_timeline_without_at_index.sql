-- Every status transition and connect writes a timeline row; the index on `at` cost each group
-- commit one more page in the WAL (and in every checkpoint) only so the hourly retention could find old rows.
-- Rows are appended in time order, so retention now finds its cut by a binary search over the ids
-- (src/devices/timeline.ts) and needs no index of its own.
DROP INDEX IF EXISTS mosque_device_events_at;
