-- A task that finds every call slot of its provider taken waits here (waiting_for = 'slot') instead of asking
-- again every second. The end of a call (its slot's release) and the recovery of a dead worker's attempt (which
-- frees the slot it held) wake as many waiters as there are free slots, interactive work first; the dispatcher's
-- recovery scan does the same for slots freed by running out (held_until), and SLOT_WAIT_SECONDS is the timer
-- that ends a wait nothing woke.
ALTER TABLE tasks DROP CONSTRAINT tasks_waiting_for_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_waiting_for_check CHECK (waiting_for IN ('input', 'budget', 'slot'));
CREATE INDEX tasks_waiting_for_slot ON tasks (kind, id) WHERE status = 'retry' AND waiting_for = 'slot';

-- wake_slot_waiters: make due now as many of a kind's slot waiters as `provider`'s free slots allow (less the
-- waiters already due, which are on their way to a slot), interactive first, then bulk (which may use only the
-- first `bulk_slots`, and none while its lane is paused); oldest first, skipping tasks another transaction holds.
-- Due bulk waiters do not hold back interactive ones: their messages wait for room in the metered bulk queues,
-- and the bulk lane takes no slot while interactive work waits for one.
-- Their outbox rows are due at once too; it returns those rows' ids, which the waker may send itself.
CREATE FUNCTION wake_slot_waiters(p_kind task_kind, p_provider text, p_bulk_slots integer) RETURNS SETOF bigint
LANGUAGE plpgsql AS $$
DECLARE
    free_all integer;
    free_bulk integer;
    due_interactive integer;
    due_bulk integer;
    woke_interactive integer := 0;
BEGIN
    SELECT count(*), count(*) FILTER (WHERE slot <= p_bulk_slots) INTO free_all, free_bulk
    FROM provider_slots WHERE provider = p_provider AND (holder IS NULL OR held_until < now());
    IF free_all = 0 THEN
        RETURN;
    END IF;
    SELECT count(*) FILTER (WHERE o.lane = 'interactive'), count(*) FILTER (WHERE o.lane = 'bulk')
    INTO due_interactive, due_bulk
    FROM tasks t JOIN outbox o ON o.task_id = t.id AND o.sent_at IS NULL
    WHERE t.kind = p_kind AND t.status = 'retry' AND t.waiting_for = 'slot' AND t.available_at <= now();
    IF free_all - due_interactive > 0 THEN
        RETURN QUERY
        WITH picked AS (
            SELECT t.id FROM tasks t JOIN outbox o ON o.task_id = t.id AND o.sent_at IS NULL
            WHERE t.kind = p_kind AND t.status = 'retry' AND t.waiting_for = 'slot' AND t.available_at > now()
              AND o.lane = 'interactive'
            ORDER BY t.id LIMIT free_all - due_interactive FOR NO KEY UPDATE OF t SKIP LOCKED
        ), woken AS (
            UPDATE tasks t SET available_at = now() FROM picked WHERE t.id = picked.id RETURNING t.id
        )
        UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL
        RETURNING o.id;
        GET DIAGNOSTICS woke_interactive = ROW_COUNT;
    END IF;
    IF least(free_bulk, free_all - due_interactive - woke_interactive) - due_bulk > 0 AND NOT lane_paused('bulk') THEN
        RETURN QUERY
        WITH picked AS (
            SELECT t.id FROM tasks t JOIN outbox o ON o.task_id = t.id AND o.sent_at IS NULL
            WHERE t.kind = p_kind AND t.status = 'retry' AND t.waiting_for = 'slot' AND t.available_at > now()
              AND o.lane = 'bulk'
            ORDER BY t.id LIMIT least(free_bulk, free_all - due_interactive - woke_interactive) - due_bulk
            FOR NO KEY UPDATE OF t SKIP LOCKED
        ), woken AS (
            UPDATE tasks t SET available_at = now() FROM picked WHERE t.id = picked.id RETURNING t.id
        )
        UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL
        RETURNING o.id;
    END IF;
END
$$;

-- /metrics counts a wait for a slot among the waits (`slot`), apart from the provider's own busy answers.
CREATE OR REPLACE FUNCTION metric_count_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    waits text := CASE NEW.details->>'error_class'
                      WHEN 'Busy' THEN 'busy' WHEN 'SlotsBusy' THEN 'slot' WHEN 'WaitingForInput' THEN 'input'
                      WHEN 'BudgetReached' THEN 'budget' END;
BEGIN
    INSERT INTO metric_counters (name, outcome, shard, n)
    SELECT c.name, c.label, pg_backend_pid(), 1
    FROM (VALUES ('retries', '', NEW.to_status = 'retry' AND waits IS NULL),
                 ('waits', coalesce(waits, ''), NEW.to_status = 'retry' AND waits IS NOT NULL),
                 ('manual_retries', '', NEW.action = 'manual_retry'),
                 ('duplicate_risk_accepted', '', NEW.action = 'duplicate_risk_accepted')) AS c (name, label, counted)
    WHERE c.counted
    ON CONFLICT (name, provider, outcome, shard) DO UPDATE SET n = metric_counters.n + 1;
    RETURN NULL;
END $$;
