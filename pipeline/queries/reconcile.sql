-- reconcile_try_lock: one reconcile run at a time (session lock, released at the end of the run)
SELECT pg_try_advisory_lock(7411003) AS locked;

-- reconcile_unlock: release the run lock
SELECT pg_advisory_unlock(7411003);

-- reconcile_runs_start: record a run
INSERT INTO reconcile_runs DEFAULT VALUES RETURNING id;

-- reconcile_runs_finish: what a run did
UPDATE reconcile_runs SET finished_at = now(), counts = %(counts)s, errors = %(errors)s WHERE id = %(run_id)s;

-- reconcile_expired_leases: running tasks whose lease ran out, oldest first (a live lease is never listed)
SELECT t.*, v.cancel_requested_at IS NOT NULL AS cancel_requested FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status = 'running' AND t.lease_until < now()
ORDER BY t.lease_until LIMIT %(limit)s;

-- reconcile_unknown: unknown tasks to ask the provider about again, least recently tried first
SELECT t.*, false AS cancel_requested FROM tasks t
WHERE t.status = 'unknown' AND t.kind::text = ANY(%(kinds)s)
ORDER BY t.updated_at LIMIT %(limit)s;

-- reconcile_redispatch: a fresh message for due, runnable tasks whose message was lost
-- (sent long ago and never claimed, or never written), in the version's lane; at most one pending row per task
INSERT INTO outbox (task_id, queue, lane, available_at)
SELECT t.id, t.kind, v.lane, now() FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
WHERE t.status IN ('ready', 'retry') AND t.available_at <= now() - make_interval(secs => %(threshold)s)
  AND t.attempts < t.max_attempts AND t.deadline_at > now()
  AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id
                  AND (o.sent_at IS NULL OR o.sent_at > now() - make_interval(secs => %(threshold)s)))
ORDER BY t.available_at LIMIT %(limit)s
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id;

-- reconcile_past_deadline: waiting tasks whose deadline passed, earliest first (tasks_fail_past_deadline fails them)
SELECT id FROM tasks WHERE status IN ('ready', 'retry') AND deadline_at <= now()
ORDER BY deadline_at LIMIT %(limit)s;

-- reconcile_contents_with_old_work: contents whose older versions still have unfinished tasks, with their current
-- version (tasks_supersede_older supersedes them, as a save does)
SELECT DISTINCT t.content_id, c.current_version FROM tasks t JOIN contents c ON c.id = t.content_id
WHERE t.status IN ('ready', 'running', 'retry', 'unknown') AND t.version < c.current_version
LIMIT %(limit)s;

-- reconcile_outbox_unblocked: queue dependents whose dependencies all succeeded but got no message
INSERT INTO outbox (task_id, queue, lane, available_at)
SELECT t.id, t.kind, v.lane, now() FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status = 'ready' AND EXISTS (SELECT 1 FROM task_deps d WHERE d.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id)
LIMIT %(limit)s
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id;

-- reconcile_mark_if_due: claim a periodic step if it last ran longer ago than the interval (or never)
INSERT INTO reconcile_marks (name, ran_at) VALUES (%(name)s, now())
ON CONFLICT (name) DO UPDATE SET ran_at = now()
WHERE reconcile_marks.ran_at < now() - make_interval(secs => %(interval)s)
RETURNING ran_at;

-- reconcile_stale_assets: assets past retention that no current or approved version uses
SELECT a.sha256 FROM assets a
WHERE a.created_at < now() - make_interval(days => %(days)s)
  AND NOT EXISTS (SELECT 1 FROM tasks t JOIN contents c ON c.id = t.content_id
                  WHERE t.asset_sha256 = a.sha256
                    AND (t.version = c.current_version OR t.version = c.approved_version))
LIMIT %(limit)s;

-- reconcile_delete_asset: drop an asset from the index (its file is deleted after commit)
WITH inputs AS (DELETE FROM asset_inputs WHERE sha256 = %(sha256)s)
DELETE FROM assets WHERE sha256 = %(sha256)s RETURNING sha256;

-- reconcile_old_terminal_tasks: finished tasks past retention whose receipts may be compacted
SELECT id FROM tasks
WHERE status IN ('succeeded', 'failed', 'superseded', 'cancelled')
  AND updated_at < now() - make_interval(days => %(days)s) AND id > %(after)s
ORDER BY id LIMIT %(limit)s;
