-- An attempt's claim and its success, each one statement: the worker sends one round trip and one message, and
-- PostgreSQL runs the steps with their plans kept for the session. The rules are those of the pure core
-- (pipeline/core/lease.py), which stays the specification: tests/integration/engine/test_attempt_functions.py
-- drives the same cases through both and requires the same decisions.

-- The steps the worker's statements and these functions share, each written once as a function named as its
-- query (pipeline/queries): input_calls_take, input_calls_release, provider_slot_and_rate_take,
-- provider_slots_ensure, outbox_add_unblocked.

-- input_calls_take: hold the right to call for the input of a media task held under `p_lease_token`, unless the
-- input already has a stored asset or a live holder has it (a holder is live while its lease is renewed, or while
-- its task is running or unknown: a crashed holder is released only by the reconciler's decision, and an unknown
-- one only by a person's); the holder's task id, or NULL. Takes nothing when the lease is not ours.
CREATE FUNCTION input_calls_take(p_task_id bigint, p_lease_token uuid, p_hold_seconds double precision)
RETURNS bigint LANGUAGE sql AS $$
    INSERT INTO input_calls AS i (fingerprint, task_id, lease_token, held_until)
    SELECT t.fingerprint, t.id, t.lease_token, now() + make_interval(secs => p_hold_seconds)
    FROM tasks t
    WHERE t.id = p_task_id AND t.lease_token = p_lease_token AND t.kind <> 'bundle'
      AND NOT EXISTS (SELECT 1 FROM asset_inputs a WHERE a.fingerprint = t.fingerprint)
    ON CONFLICT (fingerprint) DO UPDATE
        SET task_id = excluded.task_id, lease_token = excluded.lease_token, held_until = excluded.held_until,
            since = now()
        WHERE i.task_id = excluded.task_id
           OR (i.held_until < now()
               AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.id = i.task_id AND h.status IN ('running', 'unknown')))
    RETURNING i.task_id
$$;

-- input_calls_release: the holder is done with the input (its asset is stored, or nothing was paid); the tasks
-- waiting for it may run now (they and their messages are due at once)
CREATE FUNCTION input_calls_release(p_fingerprint text, p_lease_token uuid) RETURNS void LANGUAGE sql AS $$
    WITH released AS (
        DELETE FROM input_calls WHERE fingerprint = p_fingerprint AND lease_token = p_lease_token
        RETURNING fingerprint
    ), woken AS (
        UPDATE tasks t SET available_at = now() FROM released
        WHERE t.fingerprint = released.fingerprint AND t.status = 'retry' AND t.waiting_for = 'input'
        RETURNING t.id
    )
    UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL
$$;

-- provider_slot_and_rate_take: hold a free slot among the first `p_max` for `p_holder` (an attempt's lease token)
-- and count one call in this minute's window, both or neither (a holder that died frees its slot at held_until).
-- The bulk lane asks with `p_max` short of the interactive slots at the top, and takes none while interactive work
-- of its kind waits for a slot (that work is woken first); the interactive lane (`p_top_first`) takes any, the top
-- ones first, so it leaves the bulk lane's slots to the bulk lane while it can. `slot` NULL: nothing was taken,
-- because no slot was free (`slot_free`) or the rate was reached (`seconds_left` of this minute).
CREATE FUNCTION provider_slot_and_rate_take(p_provider text, p_max integer, p_top_first boolean, p_kind task_kind,
                                            p_holder uuid, p_limit integer, p_hold_seconds double precision)
RETURNS TABLE (slot integer, slot_free boolean, seconds_left double precision) LANGUAGE sql AS $$
    WITH free AS (
        SELECT s.provider, s.slot FROM provider_slots s
        WHERE s.provider = p_provider AND s.slot <= p_max AND (s.holder IS NULL OR s.held_until < now())
          AND (p_top_first OR NOT EXISTS (
                SELECT 1 FROM tasks w JOIN versions v ON v.content_id = w.content_id AND v.version = w.version
                WHERE w.kind = p_kind AND w.status = 'retry' AND w.waiting_for = 'slot' AND v.lane = 'interactive'))
        ORDER BY CASE WHEN p_top_first THEN -s.slot ELSE s.slot END LIMIT 1 FOR UPDATE SKIP LOCKED
    ), rate AS (
        INSERT INTO provider_rate AS r (provider, minute, calls)
        SELECT free.provider, date_trunc('minute', now()), 1 FROM free
        ON CONFLICT (provider, minute) DO UPDATE SET calls = r.calls + 1
        WHERE r.calls < p_limit
        RETURNING r.calls
    ), taken AS (
        UPDATE provider_slots s SET holder = p_holder, held_until = now() + make_interval(secs => p_hold_seconds)
        FROM free WHERE s.provider = free.provider AND s.slot = free.slot AND EXISTS (SELECT 1 FROM rate)
        RETURNING s.slot
    )
    SELECT (SELECT taken.slot FROM taken), EXISTS (SELECT 1 FROM free), 60 - extract(second FROM now())::float8
$$;

-- provider_slots_ensure: make sure slots 1..max exist for a provider (made at its first call, and when its max
-- grows; a look first, so the usual call writes nothing)
CREATE FUNCTION provider_slots_ensure(p_provider text, p_max integer) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM provider_slots WHERE provider = p_provider AND slot = p_max) THEN
        INSERT INTO provider_slots (provider, slot)
        SELECT p_provider, n FROM generate_series(1, p_max) n ON CONFLICT DO NOTHING;
    END IF;
END
$$;

-- outbox_add_unblocked: a message for each waiting dependent of this task whose dependencies all succeeded; the
-- new outbox rows' ids
CREATE FUNCTION outbox_add_unblocked(p_task_id bigint) RETURNS SETOF bigint LANGUAGE sql AS $$
    INSERT INTO outbox (task_id, queue, lane, available_at)
    SELECT t.id, t.kind, v.lane, t.available_at FROM task_deps d JOIN tasks t ON t.id = d.task_id
    JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
    WHERE d.depends_on = p_task_id AND t.status IN ('ready', 'retry')
      AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
    ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
    RETURNING id
$$;

-- attempt_claim: take a runnable task for one attempt under `p_lease_token`, or return no row (a duplicate or early
-- message, a task of a cancelled, superseded or paused version, a dependency not yet succeeded: nothing changes).
-- With the claim, in the same transaction: the hold on the input's one paid call (input_calls), the asset the
-- input already has, the provider's earlier refusal of the input and, for a task that holds its input and has
-- neither, a call slot and a rate token of its provider (both or neither), when `p_calls` names the provider's
-- slots for the task's kind ({"image": {"slots", "max", "bulk_max", "rate", "hold_seconds"}}): a kind left out
-- takes what its call needs from the worker afterwards, in the same transaction (a call with a booking).
CREATE FUNCTION attempt_claim(p_task_id bigint, p_lease_token uuid, p_worker text, p_lease_seconds double precision,
                              p_rq_job_id text, p_attempt_seconds double precision, p_receipt_store text,
                              p_calls jsonb)
RETURNS TABLE (id bigint, content_id bigint, version integer, kind text, block_key text, input jsonb,
               fingerprint text, attempts integer, max_attempts integer, deadline_at timestamptz,
               lease_token uuid, lease_until timestamptz, attempt_ends_at timestamptz, lane text,
               holder bigint, stored_sha256 text, stored_media_type text, stored_size bigint, stored_width integer,
               stored_height integer, stored_duration_ms integer, refused_by bigint, refused_message text,
               slot integer, slot_free boolean, rate_seconds_left double precision)
LANGUAGE plpgsql AS $$
#variable_conflict use_column
DECLARE
    was task_status;
    t tasks%ROWTYPE;
    v_lane lane;
    call jsonb;
BEGIN
    -- not FOR UPDATE: an event row being written for this task holds KEY SHARE on it, which must not make the
    -- claim skip the task
    SELECT x.status, v.lane INTO was, v_lane FROM tasks x
    JOIN contents c ON c.id = x.content_id
    JOIN versions v ON v.content_id = x.content_id AND v.version = x.version
    WHERE x.id = p_task_id
      AND x.status IN ('ready', 'retry')
      AND x.available_at <= now()
      AND x.attempts < x.max_attempts
      AND x.deadline_at > now()
      AND c.current_version = x.version
      AND v.cancel_requested_at IS NULL
      AND NOT lane_paused(v.lane)
      AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = x.id)
    FOR NO KEY UPDATE OF x SKIP LOCKED;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    UPDATE tasks x SET status = 'running', attempts = x.attempts + 1, lease_token = p_lease_token,
           lease_until = now() + make_interval(secs => p_lease_seconds), heartbeat_at = now(),
           worker = p_worker, receipt_store = p_receipt_store, waiting_for = NULL, updated_at = now(),
           attempt_ends_at = least(x.deadline_at, now() + make_interval(secs => p_attempt_seconds))
    WHERE x.id = p_task_id
    RETURNING x.* INTO t;
    INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt,
                        lease_token, reason, details)
    VALUES (t.id, t.content_id, t.version, 'transition', was, 'running', p_worker, t.attempts, p_lease_token,
            'claimed', jsonb_build_object('rq_job_id', p_rq_job_id));

    id := t.id; content_id := t.content_id; version := t.version; kind := t.kind::text; block_key := t.block_key;
    input := t.input; fingerprint := t.fingerprint; attempts := t.attempts; max_attempts := t.max_attempts;
    deadline_at := t.deadline_at; lease_token := t.lease_token; lease_until := t.lease_until;
    attempt_ends_at := t.attempt_ends_at; lane := v_lane::text;
    IF t.kind = 'bundle' THEN   -- local work: no input to hold, nothing to reuse, no call
        RETURN NEXT;
        RETURN;
    END IF;

    holder := input_calls_take(t.id, p_lease_token, p_lease_seconds);
    SELECT a.sha256, a.media_type, a.size, a.width, a.height, a.duration_ms
    INTO stored_sha256, stored_media_type, stored_size, stored_width, stored_height, stored_duration_ms
    FROM asset_inputs i JOIN assets a ON a.sha256 = i.sha256 WHERE i.fingerprint = t.fingerprint;
    SELECT r.task_id, r.message INTO refused_by, refused_message
    FROM refused_inputs r WHERE r.fingerprint = t.fingerprint;

    call := p_calls -> t.kind::text;
    IF call IS NOT NULL AND holder = t.id AND stored_sha256 IS NULL AND refused_by IS NULL THEN
        PERFORM provider_slots_ensure(call->>'slots', (call->>'max')::int);
        SELECT x.slot, x.slot_free, x.seconds_left FROM provider_slot_and_rate_take(
            call->>'slots', CASE WHEN v_lane = 'bulk' THEN (call->>'bulk_max')::int ELSE (call->>'max')::int END,
            v_lane <> 'bulk', t.kind, p_lease_token, (call->>'rate')::int, (call->>'hold_seconds')::float8) x
        INTO slot, slot_free, rate_seconds_left;
    END IF;
    RETURN NEXT;
END
$$;

-- attempt_succeed: a worker's success, fenced by its lease: the asset indexed as its input's, the input's hold
-- released (its waiters due now), the task `succeeded` with its event and its waiting dependents' messages (they
-- are locked first, in id order, so concurrent completions release each exactly once), then the call's ledger row
-- and its slot given back with the slot waiters that release lets run. If the lease was lost, the paid result is
-- still kept (asset, input, ledger, slot): a cancel requested meanwhile cancels the task, and otherwise nothing
-- else is written. `status`: 'succeeded', 'cancelled' or 'lost' (then `current` is the task's status);
-- `unblocked` and `woken` are the outbox rows to send now.
CREATE FUNCTION attempt_succeed(p_task_id bigint, p_lease_token uuid, p_actor text, p_sha256 text,
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
    PERFORM 1 FROM task_deps d JOIN tasks x ON x.id = d.task_id WHERE d.depends_on = p_task_id
    ORDER BY x.id FOR NO KEY UPDATE OF x;
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

-- wake_slot_waiters returns at once when no task of the kind waits for a slot (asked through the partial index
-- tasks_waiting_for_slot), as after nearly every call: the counts of free slots and due waiters (0019's body, now
-- wake_slot_waiters_counted) then cost the completion for nothing.
ALTER FUNCTION wake_slot_waiters(task_kind, text, integer) RENAME TO wake_slot_waiters_counted;
CREATE FUNCTION wake_slot_waiters(p_kind task_kind, p_provider text, p_bulk_slots integer)
RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM tasks WHERE kind = p_kind AND status = 'retry' AND waiting_for = 'slot') THEN
        RETURN QUERY SELECT * FROM wake_slot_waiters_counted(p_kind, p_provider, p_bulk_slots);
    END IF;
END
$$;
