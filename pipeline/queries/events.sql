-- The audit trail. State changes write their own event in the same statement (tasks.sql).

-- events_insert: an audit row that no state change writes itself: a person's decision (approve, manual retry,
-- resolve, each with the statuses it moved between) or a note of the work (reused)
INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, lease_token,
                    reason, details)
VALUES (%(task_id)s, %(content_id)s, %(version)s, %(action)s, %(from_status)s, %(to_status)s, %(actor)s,
        %(attempt)s, %(lease_token)s, %(reason)s, %(details)s);

-- events_of_task: a task's history, oldest first
SELECT * FROM events WHERE task_id = %(task_id)s ORDER BY id;

-- events_of_version: every event of a version, oldest first (task timelines and version decisions)
SELECT id, task_id, action, from_status, to_status, actor, attempt, reason, details, at
FROM events WHERE content_id = %(content_id)s AND version = %(version)s ORDER BY id;

-- events_last_version_decision: a content's latest decision about a version (approved, rejected, changes
-- requested, approval withdrawn), through the partial index events_version_decisions
SELECT id, version, action, actor, reason, at FROM events
WHERE content_id = %(content_id)s AND task_id IS NULL
  AND action IN ('approved', 'rejected', 'changes_requested', 'approval_withdrawn')
ORDER BY id DESC LIMIT 1;

-- events_approvals_of_content: a content's approvals and withdrawals, oldest first: its approval record
-- (pipeline/core/approvals.py), through the partial index events_version_decisions
SELECT id, version, action, actor, reason, at FROM events
WHERE content_id = %(content_id)s AND task_id IS NULL AND action IN ('approved', 'approval_withdrawn')
ORDER BY id;
