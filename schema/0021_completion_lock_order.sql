-- A completion locks its own task and the other tasks it writes in one statement, in id order: its waiting
-- dependents (a success releases them exactly once) and the tasks waiting for its input (their wait ends with its
-- call). Every statement that locks several tasks locks them in id order, a save's supersede among them, so two
-- such statements wait for each other instead of deadlocking. Until now a completion locked its dependents and its
-- input's waiters before its own task, and a save that had locked that task deadlocked with it
-- (tests/integration/engine/test_lock_order.py).

-- tasks_lock_settling: lock a task that is being settled, and with it, in one statement in id order, its
-- dependents (`p_dependents`) and the tasks waiting for its input (`p_input_waiters`)
CREATE FUNCTION tasks_lock_settling(p_task_id bigint, p_dependents boolean, p_input_waiters boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM tasks x
    WHERE x.id IN (SELECT p_task_id
                   UNION ALL
                   SELECT d.task_id FROM task_deps d WHERE p_dependents AND d.depends_on = p_task_id
                   UNION ALL
                   SELECT w.id FROM tasks s JOIN tasks w ON w.fingerprint = s.fingerprint
                   WHERE p_input_waiters AND s.id = p_task_id AND w.status = 'retry' AND w.waiting_for = 'input')
    ORDER BY x.id FOR NO KEY UPDATE OF x;
END
$$;

-- input_calls_release (0020), with the waiters it wakes locked in id order before they are written: a release
-- without a move (a lease lost before the call) locks no task of its own, and two waiters were otherwise locked
-- in the order of the table
CREATE OR REPLACE FUNCTION input_calls_release(p_fingerprint text, p_lease_token uuid) RETURNS void
LANGUAGE sql AS $$
    WITH released AS (
        DELETE FROM input_calls WHERE fingerprint = p_fingerprint AND lease_token = p_lease_token
        RETURNING fingerprint
    ), waiting AS (
        SELECT t.id FROM tasks t JOIN released ON t.fingerprint = released.fingerprint
        WHERE t.status = 'retry' AND t.waiting_for = 'input'
        ORDER BY t.id FOR NO KEY UPDATE OF t
    ), woken AS (
        UPDATE tasks t SET available_at = now() FROM waiting WHERE t.id = waiting.id
        RETURNING t.id
    )
    UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL
$$;

-- attempt_succeed (0020), with the settling task's locks taken as above
CREATE OR REPLACE FUNCTION attempt_succeed(p_task_id bigint, p_lease_token uuid, p_actor text, p_sha256 text,
                                p_media_type text, p_size bigint, p_width integer, p_height integer,
                                p_duration_ms integer, p_reason text, p_details jsonb, p_ledger jsonb,
                                p_slots text, p_slot integer, p_bulk_slots integer)
RETURNS TABLE (status text, current text, unblocked bigint[], woken bigint[])
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    t tasks%ROWTYPE;
    moved tasks%ROWTYPE;
BEGIN
    SELECT x.* INTO t FROM tasks x WHERE x.id = p_task_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt_succeed: no task %', p_task_id USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM tasks_lock_settling(p_task_id, true, t.kind <> 'bundle');
    INSERT INTO assets (sha256, media_type, size, width, height, duration_ms)
    VALUES (p_sha256, p_media_type, p_size, p_width, p_height, p_duration_ms)
    ON CONFLICT (sha256) DO NOTHING;
    INSERT INTO asset_inputs (fingerprint, sha256) VALUES (t.fingerprint, p_sha256)
    ON CONFLICT (fingerprint) DO NOTHING;
    IF t.kind <> 'bundle' THEN   -- the call is over: its waiters may reuse the asset now
        PERFORM input_calls_release(t.fingerprint, p_lease_token);
    END IF;

    -- the fence: still running under our lease; a cancel requested meanwhile wins
    UPDATE tasks x
       SET status = CASE WHEN v.cancel_requested_at IS NULL THEN 'succeeded' ELSE 'cancelled' END::task_status,
           asset_sha256 = CASE WHEN v.cancel_requested_at IS NULL THEN p_sha256 ELSE x.asset_sha256 END,
           lease_token = NULL, lease_until = NULL, updated_at = now(), last_error = NULL, last_error_code = NULL,
           waiting_for = NULL
    FROM versions v
    WHERE x.id = p_task_id AND x.status = 'running' AND x.lease_token = p_lease_token
      AND v.content_id = x.content_id AND v.version = x.version
    RETURNING x.* INTO moved;
    unblocked := '{}';
    IF NOT FOUND THEN   -- lost: someone else holds or ended the task
        status := 'lost';
        SELECT x.status::text INTO current FROM tasks x WHERE x.id = p_task_id;
    ELSE
        status := moved.status::text;
        INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt,
                            lease_token, reason, details)
        VALUES (moved.id, moved.content_id, moved.version, 'transition', 'running', moved.status, p_actor,
                moved.attempts, p_lease_token,
                CASE WHEN moved.status = 'succeeded' THEN p_reason ELSE 'version cancelled' END,
                CASE WHEN moved.status = 'succeeded' THEN p_details END);
        IF moved.status = 'succeeded' THEN
            SELECT coalesce(array_agg(q ORDER BY q), '{}') INTO unblocked FROM outbox_add_unblocked(p_task_id) AS q;
        END IF;
    END IF;

    IF p_ledger IS NOT NULL THEN   -- the call was made: its row in the ledger, whatever became of the lease
        INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, http_status,
                                    latency_ms, cost, estimated_cost, reported_cost, list_cost, usage, batch_id)
        VALUES (p_task_id, (p_ledger->>'attempt')::int, p_ledger->>'provider', p_ledger->>'model',
                p_ledger->>'idempotency_key',
                p_ledger->>'outcome', (p_ledger->>'http_status')::int, (p_ledger->>'latency_ms')::int,
                (p_ledger->>'cost')::numeric, (p_ledger->>'estimated_cost')::numeric,
                (p_ledger->>'reported_cost')::numeric, (p_ledger->>'list_cost')::numeric,
                nullif(p_ledger->'usage', 'null'),
                (p_ledger->>'batch_id')::bigint);
    END IF;
    woken := '{}';
    IF p_slot IS NOT NULL THEN   -- the slot, if we still hold it, and the waiters it lets run
        UPDATE provider_slots s SET holder = NULL, held_until = NULL
        WHERE s.provider = p_slots AND s.slot = p_slot AND s.holder = p_lease_token;
        SELECT coalesce(array_agg(w), '{}') INTO woken FROM wake_slot_waiters(t.kind, p_slots, p_bulk_slots) AS w;
    END IF;
    RETURN NEXT;
END
$$;
