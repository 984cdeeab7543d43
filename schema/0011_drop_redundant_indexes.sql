-- Two indexes whose every lookup another index already serves; each cost an entry on every insert.
-- A version's tasks are found through the unique index on (content_id, version, kind, block_key), whose leading
-- columns are those of tasks_by_version; since status is indexed, every claim and completion (not a HOT update)
-- paid that entry too.
DROP INDEX tasks_by_version;
-- Every query for due outbox rows names its lane, which outbox_due_by_lane (lane, available_at) serves; a count
-- of unsent rows can read any of the partial indexes on `sent_at IS NULL`.
DROP INDEX outbox_due;
