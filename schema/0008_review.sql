-- The editors' review workflow: version decisions read from the audit trail, and regenerated assets kept.
--
-- A reviewer's decisions about a version (approved, rejected, changes requested, approval withdrawn) and an
-- editor's regeneration are events without a task, or with the regenerated task. No new table: the events
-- are the version's history. These indexes keep the reads that the delivery gate and the board make bounded.

-- The latest decision about a content's versions (delivery says why an approval was withdrawn).
CREATE INDEX events_version_decisions ON events (content_id, id)
    WHERE task_id IS NULL AND action IN ('approved', 'rejected', 'changes_requested', 'approval_withdrawn');

-- An asset replaced by a regeneration is kept: retention asks this index before deleting one.
CREATE INDEX events_replaced_assets ON events ((details->>'replaced_sha256'))
    WHERE action = 'regenerated';

-- What needs a person, across every content's current version (the attention page): an unknown outcome, a
-- failed task (with its dead letter), work paused by a budget, and work still waiting past its deadline.
-- Cancelled versions are left out: their work was stopped on purpose.
CREATE VIEW tasks_needing_attention AS
SELECT t.id, t.content_id, t.version, t.kind::text AS kind, t.block_key, t.status::text AS status, t.attempts,
       t.max_attempts, t.last_error, t.last_error_code::text AS last_error_code, t.waiting_for, t.deadline_at,
       t.updated_at, c.title, dl.reason AS dead_letter,
       CASE WHEN t.status = 'unknown' THEN 'unknown'
            WHEN t.status = 'failed' THEN 'failed'
            WHEN t.status = 'retry' AND t.waiting_for = 'budget' THEN 'budget'
            ELSE 'stuck' END AS problem
FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
LEFT JOIN dead_letters dl ON dl.task_id = t.id
WHERE t.status IN ('unknown', 'failed')
   OR (t.status = 'retry' AND t.waiting_for = 'budget')
   OR (t.status IN ('ready', 'running', 'retry') AND t.deadline_at < now());
