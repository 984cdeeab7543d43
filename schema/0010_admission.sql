-- Admission decided in the server, at a cost that does not grow with the backlog: a save's (or a retry's) limits
-- are checked and its locks taken by one call, sent with the COMMIT in the same round trip, and the pending tasks
-- are counted as they change instead of counted again under the lock by every save.

-- Pending tasks (ready, running, retry: what MAX_PENDING_TASKS bounds), per API key whose save made them (0:
-- none), kept by the triggers below in the transaction that changes them, so a sum read after a lock sees exactly
-- what a count(*) would. Each database backend adds to rows of its own (`shard` is its process id), so concurrent
-- transactions never wait on each other here; the reconciler's retention folds the rows of backends that have
-- ended into shard 0 (pending_counts_fold), which leaves every sum as it was.
CREATE TABLE pending_counts (
    key_id bigint NOT NULL,
    shard  integer NOT NULL,
    n      bigint NOT NULL,
    PRIMARY KEY (key_id, shard)
);

CREATE FUNCTION pending_count_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO pending_counts (key_id, shard, n)
    SELECT coalesce(v.saved_by_key, 0), pg_backend_pid(), count(*)
    FROM added t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
    WHERE t.status IN ('ready', 'running', 'retry')
    GROUP BY 1
    ON CONFLICT (key_id, shard) DO UPDATE SET n = pending_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

-- A task that starts or stops being pending (a row trigger: it fires only for those, not for claims or beats).
CREATE FUNCTION pending_count_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    task  tasks%ROWTYPE;
    delta integer;
BEGIN
    IF TG_OP = 'DELETE' THEN
        task := OLD;
        delta := -1;
    ELSE
        task := NEW;
        delta := CASE WHEN NEW.status IN ('ready', 'running', 'retry') THEN 1 ELSE -1 END;
    END IF;
    INSERT INTO pending_counts (key_id, shard, n)
    SELECT coalesce((SELECT saved_by_key FROM versions WHERE content_id = task.content_id AND version = task.version),
                    0), pg_backend_pid(), delta
    ON CONFLICT (key_id, shard) DO UPDATE SET n = pending_counts.n + EXCLUDED.n;
    RETURN NULL;
END $$;

CREATE TRIGGER tasks_pending_inserted AFTER INSERT ON tasks REFERENCING NEW TABLE AS added
    FOR EACH STATEMENT EXECUTE FUNCTION pending_count_inserted();
CREATE TRIGGER tasks_pending_changed AFTER UPDATE OF status ON tasks FOR EACH ROW
    WHEN ((OLD.status IN ('ready', 'running', 'retry')) <> (NEW.status IN ('ready', 'running', 'retry')))
    EXECUTE FUNCTION pending_count_changed();
CREATE TRIGGER tasks_pending_deleted AFTER DELETE ON tasks FOR EACH ROW
    WHEN (OLD.status IN ('ready', 'running', 'retry'))
    EXECUTE FUNCTION pending_count_changed();

-- The tasks pending before this migration, counted once (shard 0 belongs to no backend). The triggers above
-- already hold their lock on tasks, so nothing changes between this count and the first change they see.
INSERT INTO pending_counts (key_id, shard, n)
SELECT coalesce(v.saved_by_key, 0), 0, count(*)
FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status IN ('ready', 'running', 'retry')
GROUP BY 1;

-- Tasks that still need a worker, all of them or those of one key's saves.
CREATE FUNCTION pending_tasks(key_id bigint DEFAULT NULL) RETURNS bigint LANGUAGE sql STABLE AS $$
    SELECT coalesce(sum(n), 0)::bigint FROM pending_counts WHERE pending_tasks.key_id IS NULL OR key_id = pending_tasks.key_id
$$;

-- Admit `adding` tasks already inserted by the calling transaction, or refuse with an error naming the limit:
--   MPK01 the key made more than `key_saves_limit` saves in the last minute (DETAIL: saves, window_left)
--   MPK02 the key's saves would hold more than `key_pending_limit` pending tasks (DETAIL: pending)
--   MPA01 more than `pending_limit` tasks would be pending (DETAIL: pending, adding)
-- A refusal aborts the transaction: nothing it wrote is kept. The key's own lock (other keys never wait) comes
-- before the shared one; each sum is a statement of its own run after its lock was granted, so it sees every
-- admission committed before and this transaction's own tasks, and the limits cannot be raced past. The locks
-- are released by the caller's COMMIT, which follows in the same round trip. `key_id` NULL: no key limits.
CREATE FUNCTION admit_save(adding integer, pending_limit integer, key_id bigint, key_pending_limit integer,
                           key_saves_limit integer) RETURNS bigint LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    key_pending bigint;
    key_saves   bigint;
    window_left integer;
    pending     bigint;
BEGIN
    IF key_id IS NOT NULL THEN
        PERFORM pg_advisory_xact_lock(7411005, (key_id % 2147483647)::integer);
        key_pending := pending_tasks(key_id);
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
