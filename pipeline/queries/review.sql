-- contents_lock: one content item, locked so approvals of it happen one at a time
SELECT * FROM contents WHERE id = %(content_id)s FOR UPDATE;

-- tasks_media_not_succeeded: the media tasks of a version that keep it from approval
SELECT id, kind, block_key, status FROM tasks
WHERE content_id = %(content_id)s AND version = %(version)s AND kind <> 'bundle' AND status <> 'succeeded'
ORDER BY id;

-- contents_approve: approve a version whose media all succeeded and that is not older than the approved one;
-- the first approval of a version keeps its stamp (approving it again changes nothing but the audit trail)
WITH approved AS (
    UPDATE contents c SET approved_version = %(version)s, updated_at = now()
    WHERE c.id = %(content_id)s AND %(version)s <= c.current_version
      AND (c.approved_version IS NULL OR c.approved_version <= %(version)s)
      AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.content_id = c.id AND t.version = %(version)s
                      AND t.kind <> 'bundle' AND t.status <> 'succeeded')
    RETURNING c.id
)
UPDATE versions v SET approved_at = coalesce(v.approved_at, now()), approved_by = coalesce(v.approved_by, %(actor)s)
FROM approved WHERE v.content_id = approved.id AND v.version = %(version)s
RETURNING v.content_id, v.version, v.approved_at, v.approved_by;

-- events_insert_transition: an audit row for a decision by a person (approve, manual retry, resolve)
INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, reason, details)
VALUES (%(task_id)s, %(content_id)s, %(version)s, %(action)s, %(from_status)s, %(to_status)s, %(actor)s,
        %(attempt)s, %(reason)s, %(details)s);

-- tasks_get_with_version: a task with its version's state, to explain why an action is refused
SELECT t.*, c.current_version, v.cancel_requested_at FROM tasks t
JOIN contents c ON c.id = t.content_id
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.id = %(task_id)s;

-- dead_letters_take: drop a task's dead letter when an editor reopens it (the retry event keeps its content)
DELETE FROM dead_letters WHERE task_id = %(task_id)s RETURNING reason, last_error, attempts, at::text AS at;

-- tasks_manual_retry: an editor reopens a failed or unknown task of the current, uncancelled version,
-- with a fresh attempt budget and a fresh deadline (an old deadline would fail it again at once)
UPDATE tasks t SET waiting_for = NULL, status = 'ready', max_attempts = t.attempts + %(budget)s, available_at = now(),
       deadline_at = greatest(t.deadline_at, now() + make_interval(secs => %(deadline_seconds)s)),
       updated_at = now()
FROM contents c, versions v
WHERE t.id = %(task_id)s AND t.status = %(from_status)s
  AND c.id = t.content_id AND c.current_version = t.version
  AND v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
RETURNING t.*;

-- tasks_unmet_dependencies: how many of a task's dependencies have not succeeded yet
SELECT count(*) AS n FROM task_unmet_deps WHERE task_id = %(task_id)s;

-- tasks_extend_waiting_dependents: tasks still waiting on a reopened task get its fresh deadline too
UPDATE tasks t SET deadline_at = greatest(t.deadline_at, %(deadline_at)s), updated_at = now()
FROM task_deps d
WHERE d.depends_on = %(task_id)s AND t.id = d.task_id AND t.status IN ('ready', 'retry')
RETURNING t.id;

-- tasks_resolve_failed: an editor closes an unknown task as failed, with a dead letter naming the note
WITH moved AS (
    UPDATE tasks SET waiting_for = NULL, status = 'failed', last_error = %(last_error)s,
           last_error_code = 'resolved', updated_at = now()
    WHERE id = %(task_id)s AND status = 'unknown'
    RETURNING *
), dead AS (
    INSERT INTO dead_letters (task_id, reason, last_error, attempts)
    SELECT id, 'resolved as failed by an editor', last_error, attempts FROM moved
    ON CONFLICT (task_id) DO UPDATE SET reason = excluded.reason, last_error = excluded.last_error,
        attempts = excluded.attempts, at = now()
)
SELECT * FROM moved;

-- contents_overview: content items, newest first, with the status counts of their current version
SELECT c.id, c.title, c.locale, c.theme, c.current_version, c.approved_version, c.updated_at,
       coalesce(s.counts, '{}'::jsonb) AS counts, coalesce(s.total, 0) AS total
FROM contents c
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(status, n) AS counts, sum(n)::int AS total
    FROM (SELECT status, count(*) AS n FROM tasks t
          WHERE t.content_id = c.id AND t.version = c.current_version GROUP BY status) per_status
) s ON true
ORDER BY c.id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- contents_count: how many content items exist (for paging)
SELECT count(*) AS n FROM contents;

-- versions_of_content: a content item's versions, newest first
SELECT version, title, saved_by, saved_at, approved_at, approved_by, cancel_requested_at, cancel_requested_by
FROM versions WHERE content_id = %(content_id)s ORDER BY version DESC;

-- tasks_of_version_view: a version's tasks with their asset and whether their input already has an asset
SELECT t.id, t.kind, t.block_key, t.status, t.attempts, t.max_attempts,
       (SELECT count(*) FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NOT NULL) AS dispatches, t.available_at,
       t.deadline_at, t.lease_until, t.asset_sha256, t.last_error, t.last_error_code, t.waiting_for, t.fingerprint, t.updated_at,
       (i.sha256 IS NOT NULL) AS reusable, a.media_type, a.size AS asset_size, a.duration_ms, a.width, a.height,
       dl.reason AS dead_letter
FROM tasks t
LEFT JOIN asset_inputs i ON i.fingerprint = t.fingerprint
LEFT JOIN assets a ON a.sha256 = t.asset_sha256
LEFT JOIN dead_letters dl ON dl.task_id = t.id
WHERE t.content_id = %(content_id)s AND t.version = %(version)s
ORDER BY t.id;

-- events_of_version: every event of a version, oldest first (task timelines and version decisions)
SELECT id, task_id, action, from_status, to_status, actor, attempt, reason, details, at
FROM events WHERE content_id = %(content_id)s AND version = %(version)s ORDER BY id;

-- provider_calls_of_version: the call ledger of a version; a call made after someone accepted the risk of a
-- duplicate charge for its task names that person (read from the event, so the ledger needs no update)
SELECT pc.id, pc.task_id, pc.attempt, pc.provider, pc.model, pc.outcome, pc.http_status, pc.latency_ms,
       pc.cost, pc.at, t.kind, t.block_key,
       coalesce(pc.accepted_by,
                (SELECT e.actor FROM events e
                 WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted' AND e.attempt < pc.attempt
                 ORDER BY e.id DESC LIMIT 1)) AS accepted_by
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE t.content_id = %(content_id)s AND t.version = %(version)s
ORDER BY pc.id;

-- provider_calls_of_task_view: a task's calls, oldest first, with who accepted a possible duplicate charge
SELECT pc.*, coalesce(pc.accepted_by,
                (SELECT e.actor FROM events e
                 WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted' AND e.attempt < pc.attempt
                 ORDER BY e.id DESC LIMIT 1)) AS consented_by
FROM provider_calls pc WHERE pc.task_id = %(task_id)s ORDER BY pc.id;

-- tasks_get_for_view: one task with its version's title and its content's current and approved versions
SELECT t.*, v.title, v.locale, c.current_version, c.approved_version,
       (SELECT count(*) FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NOT NULL) AS dispatches
FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
JOIN contents c ON c.id = t.content_id
WHERE t.id = %(task_id)s;
