-- A version's tasks are found through the unique index on (content_id, version, kind, block_key), whose leading
-- columns are those of tasks_by_version: the second index only cost every task insert, and every task update that
-- changes an indexed column (each claim and each completion), one more index entry.
DROP INDEX tasks_by_version;
