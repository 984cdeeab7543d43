-- Admission decided in the server: a save's (or a retry's) limits are checked and its locks taken by one call,
-- sent with the COMMIT in the same round trip, so an admission lock is never held while a client is waited for.

-- Tasks that still need a worker: what MAX_PENDING_TASKS bounds (served by the partial index tasks_unfinished).
CREATE FUNCTION pending_tasks() RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT count(*) FROM tasks WHERE status IN ('ready', 'running', 'retry')
$$;

-- Admit `adding` tasks already inserted by the calling transaction, or refuse with an error naming the limit:
--   MPK01 the key made more than `key_saves_limit` saves in the last minute (DETAIL: saves, window_left)
--   MPK02 the key's saves would hold more than `key_pending_limit` pending tasks (DETAIL: pending)
--   MPA01 more than `pending_limit` tasks would be pending (DETAIL: pending)
-- A refusal aborts the transaction: nothing it wrote is kept. The key's own lock (other keys never wait) comes
-- before the shared one; each count is a statement of its own taken after its lock was granted, so it sees every
-- admission committed before and this transaction's own rows, and the limits cannot be raced past. The locks
-- are released by the caller's COMMIT, which follows in the same round trip. `key_id` NULL: no key limits.
CREATE FUNCTION admit_save(adding integer, pending_limit integer, key_id bigint, key_pending_limit integer,
                           key_saves_limit integer) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    key_pending bigint;
    key_saves bigint;
    window_left integer;
    pending bigint;
BEGIN
    IF key_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(7411005, (key_id % 2147483647)::integer);
        SELECT count(*) INTO key_pending FROM tasks t
            JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
            WHERE t.status IN ('ready', 'running', 'retry') AND v.saved_by_key = admit_save.key_id;
        SELECT count(*), ceil(60 - extract(epoch FROM now() - min(saved_at)))::integer INTO key_saves, window_left
            FROM versions WHERE saved_by_key = admit_save.key_id AND saved_at > now() - interval '1 minute';
        IF key_saves > key_saves_limit THEN
            RAISE EXCEPTION 'this key made too many saves in the last minute' USING ERRCODE = 'MPK01',
                DETAIL = json_build_object('saves', key_saves, 'window_left', window_left)::text;
        END IF;
        IF key_pending > key_pending_limit THEN
            RAISE EXCEPTION 'this key holds too many pending tasks' USING ERRCODE = 'MPK02',
                DETAIL = json_build_object('pending', key_pending)::text;
        END IF;
    END IF;
    PERFORM pg_advisory_xact_lock(7411002);
    pending := pending_tasks();
    IF pending > pending_limit THEN
        RAISE EXCEPTION 'too many pending tasks' USING ERRCODE = 'MPA01',
            DETAIL = json_build_object('pending', pending, 'adding', adding)::text;
    END IF;
    RETURN pending;
END
$$;
