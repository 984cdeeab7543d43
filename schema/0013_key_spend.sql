-- What each API key's actions booked per UTC day: the estimated cost of the paid calls they may cause (media
-- tasks whose input has no stored asset yet), booked when the action is admitted (pipeline/keyspend.py).
CREATE TABLE key_spend (
    key_id    bigint NOT NULL,
    day       date NOT NULL,
    estimated numeric NOT NULL DEFAULT 0 CHECK (estimated >= 0),
    PRIMARY KEY (key_id, day)
);

-- book_key_spend: book the estimated cost of the tasks an action of key `for_key` adds (`only_tasks`, or every task of
-- the version when it is NULL) against the key's limit for today; raises MPK03 with the figures when the booking
-- would pass the limit, so the whole action rolls back. Returns what was booked.
CREATE FUNCTION book_key_spend(for_key bigint, of_content bigint, of_version integer, only_tasks bigint[],
                               image_cost numeric, tts_cost numeric, spend_limit numeric)
RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE
    cost   numeric;
    booked numeric;
BEGIN
    SELECT coalesce(sum(CASE t.kind WHEN 'image' THEN image_cost WHEN 'tts' THEN tts_cost ELSE 0 END), 0) INTO cost
    FROM tasks t
    WHERE CASE WHEN only_tasks IS NULL THEN t.content_id = of_content AND t.version = of_version
               ELSE t.id = ANY (only_tasks) END
      AND t.kind <> 'bundle'
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
$$;

-- A version cancelled because the key that saved it was revoked (bin/keys revoke --cancel-pending) names the key.
ALTER TABLE versions ADD COLUMN cancelled_with_key bigint;

-- What needs a person now also lists the work a revoked key's cancellation stopped ('revoked'): someone decides
-- whether to save it again under a live key.
CREATE OR REPLACE VIEW tasks_needing_attention AS
SELECT t.id, t.content_id, t.version, t.kind::text AS kind, t.block_key, t.status::text AS status, t.attempts,
       t.max_attempts, t.last_error, t.last_error_code::text AS last_error_code, t.waiting_for, t.deadline_at,
       t.updated_at, c.title, dl.reason AS dead_letter,
       CASE WHEN v.cancelled_with_key IS NOT NULL THEN 'revoked'
            WHEN t.status = 'unknown' THEN 'unknown'
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
