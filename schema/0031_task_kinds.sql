-- Kinds as data. A task's kind was an enum, and our SQL named the kinds where it needed to know what they are (a
-- bundle holds no input, books nothing, completes the version; an image costs image_cost): a new kind meant a new
-- enum value, a new CASE branch, and a silent ELSE for whatever it forgot. Now each kind is a row of task_kinds,
-- written from the registry of kinds (pipeline/core/kinds/) by bin/migrate, and SQL reads what it needs from the
-- row: `paid` (a provider call: booked against spend limits), `shared` (an input several tasks may ask for: held
-- while made, reused once made), `completes_version` (its success makes the version deliverable). Per-kind
-- figures (costs, the bulk lane's room) come as JSON objects keyed by kind. Task kinds, outbox queues and the
-- webhook budget marks become text naming a row.
CREATE TABLE task_kinds (
    name              text PRIMARY KEY CHECK (name ~ '^[a-z][a-z0-9_]{0,31}$'),
    per_block         boolean NOT NULL,
    paid              boolean NOT NULL,
    shared            boolean NOT NULL,
    completes_version boolean NOT NULL
);
INSERT INTO task_kinds (name, per_block, paid, shared, completes_version) VALUES
    ('image', true, true, true, false),
    ('tts', true, true, true, false),
    ('bundle', false, false, false, true);

DROP TRIGGER webhook_task_changed ON tasks;
DROP VIEW tasks_needing_attention;
DROP FUNCTION provider_slot_and_rate_take(text, integer, boolean, task_kind, uuid, integer, double precision);
DROP FUNCTION wake_slot_waiters(task_kind, text, integer);
DROP FUNCTION wake_slot_waiters_counted(task_kind, text, integer);
DROP FUNCTION book_spend(bigint, bigint, integer, bigint[], numeric, numeric, numeric, numeric);
DROP FUNCTION book_key_spend(bigint, bigint, integer, bigint[], numeric, numeric, numeric);
ALTER TABLE tasks DROP CONSTRAINT tasks_check;   -- a version-wide kind had to be the bundle: now per_block says
ALTER TABLE tasks ALTER COLUMN kind TYPE text USING kind::text;
ALTER TABLE tasks ADD CONSTRAINT tasks_kind_fkey FOREIGN KEY (kind) REFERENCES task_kinds (name);
ALTER TABLE outbox ALTER COLUMN queue TYPE text USING queue::text;
ALTER TABLE outbox ADD CONSTRAINT outbox_queue_fkey FOREIGN KEY (queue) REFERENCES task_kinds (name);
ALTER TABLE webhook_budget_marks ALTER COLUMN kind TYPE text USING kind::text;
DROP TYPE task_kind;

CREATE VIEW tasks_needing_attention AS
SELECT t.id, t.content_id, t.version, t.kind, t.block_key, t.status::text AS status, t.attempts,
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


-- provider_slot_and_rate_take (0020)
CREATE OR REPLACE FUNCTION public.provider_slot_and_rate_take(p_provider text, p_max integer, p_top_first boolean, p_kind text, p_holder uuid, p_limit integer, p_hold_seconds double precision)
 RETURNS TABLE(slot integer, slot_free boolean, seconds_left double precision)
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
BEGIN
    RETURN QUERY
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
    SELECT (SELECT taken.slot FROM taken), EXISTS (SELECT 1 FROM free), 60 - extract(second FROM now())::float8;
END
$function$;

-- wake_slot_waiters returns at once when no task of the kind waits for a slot (asked through the partial index
-- tasks_waiting_for_slot), as after nearly every call: the counts of free slots and due waiters (0019's body, now
-- wake_slot_waiters_counted) then cost the completion for nothing.
CREATE OR REPLACE FUNCTION public.wake_slot_waiters_counted(p_kind text, p_provider text, p_bulk_slots integer)
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
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
$function$;

CREATE OR REPLACE FUNCTION public.wake_slot_waiters(p_kind text, p_provider text, p_bulk_slots integer)
 RETURNS SETOF bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    IF EXISTS (SELECT 1 FROM tasks WHERE kind = p_kind AND status = 'retry' AND waiting_for = 'slot') THEN
        RETURN QUERY SELECT * FROM wake_slot_waiters_counted(p_kind, p_provider, p_bulk_slots);
    END IF;
END
$function$;

-- book_key_spend: book the estimated cost of the tasks an action of key `for_key` adds (`only_tasks`, or every task of
-- the version when it is NULL), each at `costs` ->> its kind (absent: it costs nothing), against the key's limit for today; raises MPK03 with the figures when the booking
-- would pass the limit, so the whole action rolls back. Returns what was booked.
CREATE OR REPLACE FUNCTION public.book_key_spend(for_key bigint, of_content bigint, of_version integer, only_tasks bigint[], costs jsonb, spend_limit numeric)
 RETURNS numeric
 LANGUAGE plpgsql
AS $function$
DECLARE
    cost   numeric;
    booked numeric;
BEGIN
    SELECT coalesce(sum((costs ->> t.kind)::numeric), 0) INTO cost
    FROM tasks t
    WHERE CASE WHEN only_tasks IS NULL THEN t.content_id = of_content AND t.version = of_version
               ELSE t.id = ANY (only_tasks) END
      AND NOT EXISTS (SELECT 1 FROM asset_inputs a WHERE a.fingerprint = t.fingerprint);
    IF cost = 0 THEN
        RETURN 0;
    END IF;
    INSERT INTO key_spend AS s (key_id, day, estimated) VALUES (for_key, (now() AT TIME ZONE 'UTC')::date, cost)
    ON CONFLICT ON CONSTRAINT key_spend_pkey DO UPDATE SET estimated = s.estimated + excluded.estimated
    RETURNING s.estimated INTO booked;
    IF spend_limit IS NOT NULL AND booked > spend_limit THEN
        RAISE EXCEPTION 'this key''s daily spend would pass its limit' USING ERRCODE = 'MPK03',
            DETAIL = json_build_object('booked', booked - cost, 'adding', cost, 'limit', spend_limit)::text;
    END IF;
    RETURN cost;
END
$function$;

-- book_spend: book_key_spend (0013), and the same cost against the team of each content the tasks belong to (an
-- admin's bulk retry may span teams); raises MPK03 when the key's booking would pass `key_limit`, MPK04 when a
-- team's would pass `team_limit`, so the whole action rolls back. Returns what was booked. Teams are booked in
-- name order, so two actions never wait on each other's rows crosswise.
CREATE OR REPLACE FUNCTION public.book_spend(for_key bigint, of_content bigint, of_version integer, only_tasks bigint[], costs jsonb, key_limit numeric, team_limit numeric)
 RETURNS numeric
 LANGUAGE plpgsql
AS $function$
DECLARE
    total  numeric;
    booked numeric;
    per    record;
BEGIN
    total := book_key_spend(for_key, of_content, of_version, only_tasks, costs, key_limit);
    IF total = 0 THEN
        RETURN 0;
    END IF;
    FOR per IN
        SELECT c.team, sum((costs ->> t.kind)::numeric) AS cost
        FROM tasks t JOIN contents c ON c.id = t.content_id
        WHERE CASE WHEN only_tasks IS NULL THEN t.content_id = of_content AND t.version = of_version
                   ELSE t.id = ANY (only_tasks) END
          AND costs ? t.kind
          AND NOT EXISTS (SELECT 1 FROM asset_inputs a WHERE a.fingerprint = t.fingerprint)
        GROUP BY c.team ORDER BY c.team
    LOOP
        INSERT INTO team_spend AS s (team, day, estimated)
        VALUES (per.team, (now() AT TIME ZONE 'UTC')::date, per.cost)
        ON CONFLICT ON CONSTRAINT team_spend_pkey DO UPDATE SET estimated = s.estimated + excluded.estimated
        RETURNING s.estimated INTO booked;
        IF team_limit IS NOT NULL AND booked > team_limit THEN
            RAISE EXCEPTION 'this team''s daily spend would pass its limit' USING ERRCODE = 'MPK04',
                DETAIL = json_build_object('team', per.team, 'booked', booked - per.cost, 'adding', per.cost,
                                           'limit', team_limit)::text;
        END IF;
    END LOOP;
    RETURN total;
END
$function$;

-- attempt_claim: take a runnable task for one attempt under `p_lease_token`, or return no row (a duplicate or early
-- message, a task of a cancelled, superseded or paused version, a dependency not yet succeeded: nothing changes).
-- With the claim, in the same transaction: the hold on the input's one paid call (input_calls), the asset the
-- input already has, the provider's earlier refusal of the input and, for a task that holds its input and has
-- neither, a call slot and a rate token of its provider (both or neither), when `p_calls` names the provider's
-- slots for the task's kind ({"image": {"slots", "max", "bulk_max", "rate", "hold_seconds"}}): a kind left out
-- takes what its call needs from the worker afterwards, in the same transaction (a call with a booking).
CREATE OR REPLACE FUNCTION public.attempt_claim(p_task_id bigint, p_lease_token uuid, p_worker text, p_lease_seconds double precision, p_rq_job_id text, p_attempt_seconds double precision, p_receipt_store text, p_calls jsonb)
 RETURNS TABLE(id bigint, content_id bigint, version integer, kind text, block_key text, input jsonb, fingerprint text, attempts integer, max_attempts integer, deadline_at timestamp with time zone, lease_token uuid, lease_until timestamp with time zone, attempt_ends_at timestamp with time zone, lane text, holder bigint, stored_sha256 text, stored_media_type text, stored_size bigint, stored_width integer, stored_height integer, stored_duration_ms integer, refused_by bigint, refused_message text, slot integer, slot_free boolean, rate_seconds_left double precision)
 LANGUAGE plpgsql
AS $function$
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

    id := t.id; content_id := t.content_id; version := t.version; kind := t.kind; block_key := t.block_key;
    input := t.input; fingerprint := t.fingerprint; attempts := t.attempts; max_attempts := t.max_attempts;
    deadline_at := t.deadline_at; lease_token := t.lease_token; lease_until := t.lease_until;
    attempt_ends_at := t.attempt_ends_at; lane := v_lane::text;
    IF NOT (SELECT k.shared FROM task_kinds k WHERE k.name = t.kind) THEN   -- its own input: nothing to hold or reuse
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
$function$;

-- attempt_succeed (0020), with the settling task's locks taken as above
CREATE OR REPLACE FUNCTION public.attempt_succeed(p_task_id bigint, p_lease_token uuid, p_actor text, p_sha256 text, p_media_type text, p_size bigint, p_width integer, p_height integer, p_duration_ms integer, p_reason text, p_details jsonb, p_ledger jsonb, p_slots text, p_slot integer, p_bulk_slots integer)
 RETURNS TABLE(status text, current text, unblocked bigint[], woken bigint[])
 LANGUAGE plpgsql
AS $function$
#variable_conflict use_column
DECLARE
    t tasks%ROWTYPE;
    moved tasks%ROWTYPE;
BEGIN
    SELECT x.* INTO t FROM tasks x WHERE x.id = p_task_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'attempt_succeed: no task %', p_task_id USING ERRCODE = 'no_data_found';
    END IF;
    PERFORM tasks_lock_settling(p_task_id, true, (SELECT k.shared FROM task_kinds k WHERE k.name = t.kind));
    INSERT INTO assets (sha256, media_type, size, width, height, duration_ms)
    VALUES (p_sha256, p_media_type, p_size, p_width, p_height, p_duration_ms)
    ON CONFLICT (sha256) DO NOTHING;
    INSERT INTO asset_inputs (fingerprint, sha256) VALUES (t.fingerprint, p_sha256)
    ON CONFLICT (fingerprint) DO NOTHING;
    IF (SELECT k.shared FROM task_kinds k WHERE k.name = t.kind) THEN   -- made: its waiters may reuse it now
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
$function$;

-- input_calls_take (0020)
CREATE OR REPLACE FUNCTION public.input_calls_take(p_task_id bigint, p_lease_token uuid, p_hold_seconds double precision)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_holder bigint;
BEGIN
    INSERT INTO input_calls AS i (fingerprint, task_id, lease_token, held_until)
    SELECT t.fingerprint, t.id, t.lease_token, now() + make_interval(secs => p_hold_seconds)
    FROM tasks t
    WHERE t.id = p_task_id AND t.lease_token = p_lease_token
      AND (SELECT k.shared FROM task_kinds k WHERE k.name = t.kind)
      AND NOT EXISTS (SELECT 1 FROM asset_inputs a WHERE a.fingerprint = t.fingerprint)
    ON CONFLICT (fingerprint) DO UPDATE
        SET task_id = excluded.task_id, lease_token = excluded.lease_token, held_until = excluded.held_until,
            since = now()
        WHERE i.task_id = excluded.task_id
           OR (i.held_until < now()
               AND NOT EXISTS (SELECT 1 FROM tasks h WHERE h.id = i.task_id AND h.status IN ('running', 'unknown')))
    RETURNING i.task_id INTO v_holder;
    RETURN v_holder;
END
$function$;

-- accepted -> started (a task's first claim after its version was saved), run time per kind
-- (claim to the end of that attempt), save -> all done per lane (the task completing the version, the bundle, succeeds)
CREATE OR REPLACE FUNCTION public.metric_observe_latency()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    task tasks%ROWTYPE;
    saved timestamptz;
    lane_of text;
    claimed timestamptz;
BEGIN
    SELECT * INTO task FROM tasks WHERE id = NEW.task_id;
    SELECT v.saved_at, v.lane::text INTO saved, lane_of FROM versions v
    WHERE v.content_id = task.content_id AND v.version = task.version;
    IF NEW.to_status = 'running' AND NEW.attempt = 1 THEN
        PERFORM metric_observe('latency_accepted_to_started', task.kind, extract(epoch FROM NEW.at - saved));
    ELSIF NEW.from_status = 'running' THEN
        SELECT e.at INTO claimed FROM events e
        WHERE e.task_id = NEW.task_id AND e.to_status = 'running' AND e.id < NEW.id ORDER BY e.id DESC LIMIT 1;
        IF claimed IS NOT NULL THEN
            PERFORM metric_observe('latency_run', task.kind, extract(epoch FROM NEW.at - claimed));
        END IF;
        IF NEW.to_status = 'succeeded' AND (SELECT k.completes_version FROM task_kinds k WHERE k.name = task.kind) THEN
            PERFORM metric_observe('latency_save_to_done', lane_of, extract(epoch FROM NEW.at - saved));
        END IF;
    END IF;
    RETURN NULL;
END $function$;

CREATE OR REPLACE TRIGGER events_latency AFTER INSERT ON public.events FOR EACH ROW WHEN (((new.task_id IS NOT NULL) AND ((new.to_status = 'running'::task_status) OR (new.from_status = 'running'::task_status)))) EXECUTE FUNCTION metric_observe_latency();

-- webhook_task_changed: the events a task's change causes (the trigger's WHEN and the kind's row say which)
CREATE OR REPLACE FUNCTION public.webhook_task_changed()
 RETURNS trigger
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_team     text;
    v_approved integer;
BEGIN
    IF NEW.status = 'succeeded' AND NOT (SELECT k.completes_version FROM task_kinds k WHERE k.name = NEW.kind) THEN
        RETURN NULL;   -- the trigger cannot ask task_kinds in its WHEN: only the version's last task goes on
    END IF;
    SELECT c.team INTO v_team FROM contents c WHERE c.id = NEW.content_id;
    IF NEW.status = 'succeeded' THEN   -- the task completing the version (the bundle): its last
        INSERT INTO webhook_version_marks AS m (content_id, version, completed)
        VALUES (NEW.content_id, NEW.version, true)
        ON CONFLICT (content_id, version) DO UPDATE SET completed = true;
        PERFORM webhook_emit('version.completed', v_team, NEW.content_id, NEW.version, NULL, '{}');
        -- a statement of its own: it sees an approval that committed while the upsert above waited for it
        SELECT c.approved_version INTO v_approved FROM contents c WHERE c.id = NEW.content_id;
        IF v_approved = NEW.version THEN
            PERFORM webhook_emit('version.deliverable', v_team, NEW.content_id, NEW.version, NULL, '{}');
        END IF;
    ELSIF NEW.status IN ('unknown', 'failed') THEN
        PERFORM webhook_emit('task.needs_attention', v_team, NEW.content_id, NEW.version, NEW.id,
                             jsonb_build_object('kind', NEW.kind, 'status', NEW.status,
                                                'reason', NEW.last_error_code, 'block', NEW.block_key));
    ELSIF NEW.waiting_for = 'budget' THEN
        INSERT INTO webhook_budget_marks (team, day, kind)
        VALUES (v_team, (now() AT TIME ZONE 'UTC')::date, NEW.kind)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM webhook_emit('budget.reached', v_team, NEW.content_id, NEW.version, NEW.id,
                                 jsonb_build_object('kind', NEW.kind, 'reason', left(NEW.last_error, 300)));
        END IF;
    END IF;
    RETURN NULL;
END
$function$;

CREATE TRIGGER webhook_task_changed AFTER UPDATE OF status, waiting_for ON tasks FOR EACH ROW
    WHEN ((NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN ('unknown', 'failed', 'succeeded'))
          OR (NEW.waiting_for = 'budget' AND OLD.waiting_for IS DISTINCT FROM 'budget'))
    EXECUTE FUNCTION webhook_task_changed();
