-- What needs a person lists the tasks whose model the provider no longer serves ('model_gone') apart from other
-- failures: one setting fixes all of them, then a retry.
CREATE OR REPLACE VIEW tasks_needing_attention AS
SELECT t.id, t.content_id, t.version, t.kind::text AS kind, t.block_key, t.status::text AS status, t.attempts,
       t.max_attempts, t.last_error, t.last_error_code::text AS last_error_code, t.waiting_for, t.deadline_at,
       t.updated_at, c.title, dl.reason AS dead_letter,
       CASE WHEN v.cancelled_with_key IS NOT NULL THEN 'revoked'
            WHEN t.status = 'unknown' THEN 'unknown'
            WHEN t.status = 'failed' AND t.last_error_code = 'refused' THEN 'refused'
            WHEN t.status = 'failed' AND t.last_error_code = 'model_gone' THEN 'model_gone'
            WHEN t.status = 'failed' THEN 'failed'
            WHEN t.status = 'retry' AND t.waiting_for = 'budget' THEN 'budget'
            ELSE 'stuck' END AS problem
FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
LEFT JOIN dead_letters dl ON dl.task_id = t.id
WHERE (v.cancel_requested_at IS NULL
       AND (t.status IN ('unknown', 'failed')
            OR (t.status = 'retry' AND t.waiting_for = 'budget')
            OR (t.status IN ('ready', 'running', 'retry') AND t.deadline_at < now())))
   OR (v.cancelled_with_key IS NOT NULL AND t.status = 'cancelled');
