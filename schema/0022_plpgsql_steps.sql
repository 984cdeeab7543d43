-- The steps a task runs on every claim and success, and the admission's count, in PL/pgSQL. PostgreSQL 15 to 17
-- plan the body of a SQL-language function that is not inlined again in every transaction that calls it (18 keeps
-- its plans for the session); PL/pgSQL keeps each statement's plan for the session on every version. Same
-- statements, signatures and volatility: a worker of the release before this one calls them unchanged.

-- input_calls_take (0020)
CREATE OR REPLACE FUNCTION input_calls_take(p_task_id bigint, p_lease_token uuid, p_hold_seconds double precision)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_holder bigint;
BEGIN
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
    RETURNING i.task_id INTO v_holder;
    RETURN v_holder;
END
$$;

-- input_calls_release (0021)
CREATE OR REPLACE FUNCTION input_calls_release(p_fingerprint text, p_lease_token uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
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
    UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL;
END
$$;

-- provider_slot_and_rate_take (0020)
CREATE OR REPLACE FUNCTION provider_slot_and_rate_take(p_provider text, p_max integer, p_top_first boolean,
                                                       p_kind task_kind, p_holder uuid, p_limit integer,
                                                       p_hold_seconds double precision)
RETURNS TABLE (slot integer, slot_free boolean, seconds_left double precision) LANGUAGE plpgsql AS $$
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
$$;

-- outbox_add_unblocked (0020)
CREATE OR REPLACE FUNCTION outbox_add_unblocked(p_task_id bigint) RETURNS SETOF bigint LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    INSERT INTO outbox (task_id, queue, lane, available_at)
    SELECT t.id, t.kind, v.lane, t.available_at FROM task_deps d JOIN tasks t ON t.id = d.task_id
    JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
    WHERE d.depends_on = p_task_id AND t.status IN ('ready', 'retry')
      AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
    ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
    RETURNING id;
END
$$;

-- metric_bucket (0005)
CREATE OR REPLACE FUNCTION metric_bucket(seconds double precision) RETURNS text LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
    RETURN coalesce((SELECT b::text FROM unnest(ARRAY[0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
                                                      3600]::numeric[]) AS b
                     WHERE seconds <= b ORDER BY b LIMIT 1), '+Inf');
END
$$;

-- metric_observe (0005)
CREATE OR REPLACE FUNCTION metric_observe(name text, label text, seconds double precision) RETURNS void
LANGUAGE plpgsql AS $$
#variable_conflict use_column
BEGIN
    INSERT INTO metric_counters AS m (name, provider, outcome, shard, n, cost)
    VALUES (metric_observe.name, metric_observe.label, metric_bucket(greatest(metric_observe.seconds, 0)),
            pg_backend_pid(), 1, greatest(metric_observe.seconds, 0))
    ON CONFLICT (name, provider, outcome, shard)
    DO UPDATE SET n = m.n + 1, cost = m.cost + EXCLUDED.cost;
END
$$;

-- lane_paused (0018): asked by every claim
CREATE OR REPLACE FUNCTION lane_paused(lane) RETURNS boolean LANGUAGE plpgsql STABLE PARALLEL SAFE AS $$
BEGIN
    RETURN EXISTS (SELECT 1 FROM lane_pauses p WHERE p.lane = $1 AND p.resumed_at IS NULL);
END
$$;

-- pending_tasks (0010): asked twice by every admission
CREATE OR REPLACE FUNCTION pending_tasks(key_id bigint DEFAULT NULL) RETURNS bigint LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_column
BEGIN
    RETURN (SELECT coalesce(sum(n), 0)::bigint FROM pending_counts
            WHERE pending_tasks.key_id IS NULL OR key_id = pending_tasks.key_id);
END
$$;
