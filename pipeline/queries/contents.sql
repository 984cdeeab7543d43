-- Contents and their immutable versions, and the admission of a save (pipeline/versions.py, review.py).

-- contents_get: one content item
SELECT * FROM contents WHERE id = %(content_id)s;

-- contents_lock: one content item, locked so approvals of it happen one at a time
SELECT * FROM contents WHERE id = %(content_id)s FOR UPDATE;

-- contents_approve: approve a version whose media all succeeded and that is not older than the approved one; who
-- and when are the approval event's (written in the same transaction, so its `at` is this `now()`), never a stamp
UPDATE contents c SET approved_version = %(version)s, updated_at = now()
WHERE c.id = %(content_id)s AND %(version)s <= c.current_version
  AND (c.approved_version IS NULL OR c.approved_version <= %(version)s)
  AND NOT EXISTS (SELECT 1 FROM tasks t JOIN task_kinds k ON k.name = t.kind
                  WHERE t.content_id = c.id AND t.version = %(version)s
                  AND NOT k.completes_version AND t.status <> 'succeeded')
RETURNING c.id AS content_id, %(version)s::integer AS version, now() AS approved_at;

-- versions_by_save_key: the version an earlier save of this API key with this Idempotency-Key created
SELECT content_id, version, save_digest, lane FROM versions
WHERE coalesce(saved_by_key, 0) = coalesce(%(key_id)s::bigint, 0) AND save_key = %(save_key)s;

-- versions_insert: a save's immutable snapshot and its content's version number, in one statement: a new content
-- item of `team` at version 1 (no `content_id`), or the next version only if the editor saw the latest one (an optimistic lock
-- on the content's current version; no row when `base_version` is not the latest or the content is unknown); the
-- save's W3C traceparent when it is traced (docs/tracing.md)
WITH bumped AS (
    UPDATE contents SET current_version = current_version + 1, title = %(title)s, locale = %(locale)s,
           theme = %(theme)s, updated_at = now(), search_text = search_text_of(%(title)s, %(blocks)s)
    WHERE id = %(content_id)s AND current_version = %(base_version)s
    RETURNING id, current_version
), created AS (
    INSERT INTO contents (title, locale, theme, current_version, search_text, team)
    SELECT %(title)s, %(locale)s, %(theme)s, 1, search_text_of(%(title)s, %(blocks)s), %(team)s
    WHERE %(content_id)s::bigint IS NULL
    RETURNING id, current_version
), content AS (
    SELECT id, current_version FROM bumped UNION ALL SELECT id, current_version FROM created
)
INSERT INTO versions (content_id, version, title, locale, theme, blocks, digest, saved_by, deadline_at,
                      save_key, save_digest, saved_by_key, lane, traceparent)
SELECT content.id, content.current_version, %(title)s, %(locale)s, %(theme)s, %(blocks)s, %(digest)s, %(saved_by)s,
       now() + make_interval(secs => %(deadline_seconds)s), %(save_key)s, %(save_digest)s, %(saved_by_key)s,
       %(lane)s, %(traceparent)s
FROM content
RETURNING *;

-- versions_traceparents: the traceparents the saves of these tasks' versions wrote (the dispatcher's spans, when
-- traced)
SELECT DISTINCT v.traceparent FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.id = ANY(%(task_ids)s) AND v.traceparent IS NOT NULL;

-- versions_get: one version
SELECT * FROM versions WHERE content_id = %(content_id)s AND version = %(version)s;

-- versions_request_cancel: record who asked to cancel a version (first request wins)
UPDATE versions SET cancel_requested_at = now(), cancel_requested_by = %(actor)s
WHERE content_id = %(content_id)s AND version = %(version)s AND cancel_requested_at IS NULL
RETURNING *;

-- admission_flush: flush the WAL up to now, so an asynchronously committed save is durable before it is
-- acknowledged (a non-transactional message with flush: no transaction id, no lock)
SELECT pg_logical_emit_message(false, 'mediapipe', 'admitted', true) AS flushed_to;

-- admission_flush_by_commit: the same on PostgreSQL 15 and 16, whose message takes no flush argument: a
-- transaction that takes a transaction id and commits synchronously waits for the WAL flush up to its own commit
-- record, which lies after every commit before it (one transaction id per save, no lock, no row)
SELECT set_config('synchronous_commit', 'on', true) AS commit_mode, pg_current_xact_id() AS flushed_by;

-- admission_admit: admit this transaction's new tasks or refuse (admit_save, schema/0010_admission.sql); with
-- `commit_async` the transaction's commit does not wait for its WAL flush, so the admission locks it holds are
-- released as soon as it is visible, and admission_flush makes it durable afterwards
SELECT admit_save(%(adding)s::integer, %(pending_limit)s::integer, %(key_id)s::bigint, %(key_pending_limit)s::integer,
                  %(key_saves_limit)s::integer) AS pending,
       CASE WHEN %(commit_async)s::boolean THEN set_config('synchronous_commit', 'off', true) END AS commit_mode;

-- admission_fold_counts: fold the pending-count rows of database backends that have ended into shard 0 (each sum
-- stays as it was; a backend that starts again under a reused process id just adds to its row anew)
WITH gone AS (
    DELETE FROM pending_counts p
    WHERE shard <> 0 AND NOT EXISTS (SELECT 1 FROM pg_stat_activity a WHERE a.pid = p.shard)
    RETURNING key_id, n
)
INSERT INTO pending_counts (key_id, shard, n)
SELECT key_id, 0, sum(n) FROM gone GROUP BY key_id
ON CONFLICT (key_id, shard) DO UPDATE SET n = pending_counts.n + EXCLUDED.n
RETURNING key_id;

-- admission_recent_rate: tasks finished in the last minute, to estimate when capacity frees up
SELECT count(*) AS done FROM events
WHERE at > now() - interval '1 minute' AND to_status IN ('succeeded', 'failed', 'unknown');

-- contents_withdraw_approval: the approved version is approved no longer (the withdrawal's event says who and why)
UPDATE contents SET approved_version = NULL, updated_at = now()
WHERE id = %(content_id)s AND approved_version = %(version)s
RETURNING id AS content_id, %(version)s::integer AS version;

-- versions_waiting_of_key: the versions a key saved that still have work no worker has started
SELECT DISTINCT t.content_id, t.version FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE v.saved_by_key = %(key_id)s AND t.status IN ('ready', 'retry') AND v.cancel_requested_at IS NULL
ORDER BY t.content_id, t.version;

-- versions_mark_cancelled_with_key: the version was cancelled because the key that saved it was revoked
UPDATE versions SET cancelled_with_key = %(key_id)s WHERE content_id = %(content_id)s AND version = %(version)s;
