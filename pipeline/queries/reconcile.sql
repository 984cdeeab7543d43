-- The reconciler's own: its lock, runs and marks, and what is due for it to decide (pipeline/reconcile.py).

-- reconcile_try_lock: one reconcile run at a time (session lock, released at the end of the run)
SELECT pg_try_advisory_lock(7411003) AS locked;

-- reconcile_unlock: release the run lock
SELECT pg_advisory_unlock(7411003);

-- reconcile_runs_start: record a run
INSERT INTO reconcile_runs DEFAULT VALUES RETURNING id;

-- reconcile_runs_finish: what a run did
UPDATE reconcile_runs SET finished_at = now(), counts = %(counts)s, errors = %(errors)s WHERE id = %(run_id)s;

-- reconcile_runs_start_slot: record a periodic job's run for its slot, with the slots of that job missed since
-- its previous run; nothing when the slot already has a run (on any machine: the unique index is the key)
WITH last AS (
    SELECT max(slot) AS slot FROM reconcile_runs WHERE job = %(job)s AND slot IS NOT NULL AND slot < %(slot)s
)
INSERT INTO reconcile_runs (job, slot, slot_seconds, missed_before)
SELECT %(job)s, %(slot)s, %(slot_seconds)s,
       greatest(0, coalesce(floor(extract(epoch FROM %(slot)s - last.slot) / %(slot_seconds)s)::int - 1, 0))
FROM last
ON CONFLICT (job, slot) WHERE slot IS NOT NULL DO NOTHING
RETURNING id, slot, missed_before;

-- reconcile_expired_leases: running tasks whose lease ran out, oldest first (a live lease is never listed)
SELECT t.*, v.cancel_requested_at IS NOT NULL AS cancel_requested FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status = 'running' AND t.lease_until < now()
  AND NOT EXISTS (SELECT 1 FROM batch_lines l   -- a batch line's task is the batch's to settle (pipeline/batches.py)
                  WHERE l.task_id = t.id AND l.lease_token = t.lease_token AND l.settled_at IS NULL)
ORDER BY t.lease_until LIMIT %(limit)s;

-- reconcile_unknown: unknown tasks to ask the provider about again, least recently tried first
SELECT t.*, false AS cancel_requested FROM tasks t
WHERE t.status = 'unknown' AND t.kind::text = ANY(%(kinds)s)
ORDER BY t.updated_at LIMIT %(limit)s;

-- reconcile_past_deadline: waiting tasks whose deadline passed, earliest first (tasks_fail_past_deadline fails them),
-- none of a paused lane
SELECT t.id FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status IN ('ready', 'retry') AND t.deadline_at <= now() AND NOT lane_paused(v.lane)
ORDER BY t.deadline_at LIMIT %(limit)s;

-- reconcile_contents_with_old_work: contents whose older versions still have unfinished tasks, with their current
-- version (tasks_supersede_older supersedes them, as a save does)
SELECT DISTINCT t.content_id, c.current_version FROM tasks t JOIN contents c ON c.id = t.content_id
WHERE t.status IN ('ready', 'running', 'retry', 'unknown') AND t.version < c.current_version
LIMIT %(limit)s;

-- reconcile_old_terminal_tasks: finished tasks past retention whose receipts may be compacted
SELECT id FROM tasks
WHERE status IN ('succeeded', 'failed', 'superseded', 'cancelled')
  AND updated_at < now() - make_interval(days => %(days)s) AND id > %(after)s
ORDER BY id LIMIT %(limit)s;
