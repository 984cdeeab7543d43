-- A store of receipts and media that cannot be written (a full disk, a read-only directory, a refusing bucket) is
-- ridden out (docs/decisions.md, "A short outage of the store is waited out, and a paid result is held for it"):
-- a task whose intent receipt cannot be written waits in `retry` with waiting_for = 'storage', spending no attempt;
-- a worker holding a paid result it cannot store yet writes a `storage_wait` event under its lease. Both count
-- among /metrics' waits (`storage`) and are listed as needing attention ('storage'), so a person sees the store
-- failing. The reason 'storage' is not used below: a new enum value cannot be used in the transaction that adds it.
ALTER TYPE task_reason ADD VALUE IF NOT EXISTS 'storage' AFTER 'budget';

ALTER TABLE tasks DROP CONSTRAINT tasks_waiting_for_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_waiting_for_check
    CHECK (waiting_for IN ('input', 'budget', 'slot', 'storage'));

-- /metrics counts a wait for the store among the waits (`storage`): a task's wait before its call (a retry whose
-- error is StorageUnavailable) and a worker's hold of a paid result the store refused (a `storage_wait` event).
CREATE OR REPLACE FUNCTION metric_count_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    waits text := CASE WHEN NEW.action = 'storage_wait' THEN 'storage'
                       ELSE CASE NEW.details->>'error_class'
                                WHEN 'Busy' THEN 'busy' WHEN 'SlotsBusy' THEN 'slot' WHEN 'WaitingForInput' THEN 'input'
                                WHEN 'BudgetReached' THEN 'budget' WHEN 'StorageUnavailable' THEN 'storage' END END;
BEGIN
    INSERT INTO metric_counters (name, outcome, shard, n)
    SELECT c.name, c.label, pg_backend_pid(), 1
    FROM (VALUES ('retries', '', NEW.to_status = 'retry' AND waits IS NULL),
                 ('waits', coalesce(waits, ''), (NEW.to_status = 'retry' OR NEW.action = 'storage_wait')
                                                 AND waits IS NOT NULL),
                 ('manual_retries', '', NEW.action = 'manual_retry'),
                 ('duplicate_risk_accepted', '', NEW.action = 'duplicate_risk_accepted')) AS c (name, label, counted)
    WHERE c.counted
    ON CONFLICT (name, provider, outcome, shard) DO UPDATE SET n = metric_counters.n + 1;
    RETURN NULL;
END $$;

DROP TRIGGER events_metric_counters ON events;
CREATE TRIGGER events_metric_counters AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.to_status = 'retry' OR NEW.action IN ('manual_retry', 'duplicate_risk_accepted', 'storage_wait'))
    EXECUTE FUNCTION metric_count_event();

-- A running task whose worker holds a paid result it could not store yet has a `storage_wait` event under its
-- current lease (events_by_task finds it; few tasks run at once).
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
            WHEN t.status = 'retry' AND t.waiting_for = 'storage' THEN 'storage'
            WHEN t.status = 'running'
                 AND EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.action = 'storage_wait'
                                                      AND e.lease_token = t.lease_token) THEN 'storage'
            ELSE 'stuck' END AS problem
FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
LEFT JOIN dead_letters dl ON dl.task_id = t.id
WHERE (v.cancel_requested_at IS NULL
       AND (t.status IN ('unknown', 'failed')
            OR (t.status = 'retry' AND t.waiting_for IN ('budget', 'storage'))
            OR (t.status IN ('ready', 'running', 'retry') AND t.deadline_at < now())
            OR (t.status = 'running'
                AND EXISTS (SELECT 1 FROM events e WHERE e.task_id = t.id AND e.action = 'storage_wait'
                                                     AND e.lease_token = t.lease_token))))
   OR (v.cancelled_with_key IS NOT NULL AND t.status = 'cancelled');
