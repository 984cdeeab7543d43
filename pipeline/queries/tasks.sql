-- Tasks, their dependencies and dead letters: every state change of a task is one query here.

-- tasks_insert_version: a new version's tasks (parallel arrays), their dependencies (the task `dep_refs[i]` may
-- run only after `dep_on_refs[i]` succeeded; a task's ref is "<kind>:<block key>") and a message for each task
-- that depends on nothing, in one statement; the messages' outbox rows. With a `claim_token` the messages are
-- claimed by the writing transaction itself (the fast path sends them after its commit).
WITH added AS (
    INSERT INTO tasks (content_id, version, kind, block_key, input, fingerprint, max_attempts, deadline_at)
    SELECT %(content_id)s, %(version)s, x.kind, x.block_key, i.input, x.fingerprint, %(max_attempts)s,
           %(deadline_at)s
    FROM unnest(%(kinds)s::text[], %(block_keys)s::text[], %(fingerprints)s::text[])
         WITH ORDINALITY AS x(kind, block_key, fingerprint, n)
    JOIN jsonb_array_elements(%(inputs)s::jsonb) WITH ORDINALITY AS i(input, n) ON i.n = x.n
    ORDER BY x.n
    RETURNING id, kind, kind::text || ':' || coalesce(block_key, '') AS ref
), deps AS (
    INSERT INTO task_deps (task_id, depends_on)
    SELECT t.id, d.id FROM unnest(%(dep_refs)s::text[], %(dep_on_refs)s::text[]) AS x(ref, on_ref)
    JOIN added t ON t.ref = x.ref JOIN added d ON d.ref = x.on_ref
)
INSERT INTO outbox (task_id, queue, lane, available_at, claim_token, claim_until, send_attempts)
SELECT t.id, t.kind, %(lane)s::lane, %(available_at)s::timestamptz, %(claim_token)s::uuid,
       CASE WHEN %(claim_token)s::uuid IS NOT NULL THEN now() + make_interval(secs => %(claim_seconds)s) END,
       CASE WHEN %(claim_token)s::uuid IS NOT NULL THEN 1 ELSE 0 END
FROM added t
WHERE t.ref <> ALL(%(dep_refs)s::text[])
ORDER BY t.id
RETURNING id, task_id, queue, lane, send_attempts;

-- tasks_get: one task
SELECT * FROM tasks WHERE id = %(task_id)s;

-- tasks_of_version: a version's tasks in a stable order
SELECT * FROM tasks WHERE content_id = %(content_id)s AND version = %(version)s ORDER BY id;

-- tasks_media_of_version: a version's media tasks, each with the index row of the asset it made (NULLs: none)
SELECT t.kind::text AS kind, t.block_key, t.status::text AS status, a.sha256, a.media_type, a.size
FROM tasks t JOIN task_kinds k ON k.name = t.kind LEFT JOIN assets a ON a.sha256 = t.asset_sha256
WHERE t.content_id = %(content_id)s AND t.version = %(version)s AND NOT k.completes_version;

-- tasks_get_with_version: a task with its version's state, to explain why an action is refused
SELECT t.*, c.current_version, v.cancel_requested_at FROM tasks t
JOIN contents c ON c.id = t.content_id
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.id = %(task_id)s;

-- tasks_of_version_states: each task of a version with its state, for the approval rule
SELECT id, kind, block_key, status FROM tasks
WHERE content_id = %(content_id)s AND version = %(version)s
ORDER BY id;

-- tasks_unmet_dependencies: how many of a task's dependencies have not succeeded yet
SELECT count(*) AS n FROM task_unmet_deps WHERE task_id = %(task_id)s;

-- tasks_claim: take a runnable task for one attempt, with the hold on its input, the asset and the refusal its
-- input already has and, for the kinds `calls` names, its call slot and rate token (schema: attempt_claim); a
-- duplicate or early message matches nothing; with `traced`, the traceparent its version's save wrote (untraced, the
-- CASE skips its subquery)
SELECT c.*, CASE WHEN %(traced)s THEN (SELECT v.traceparent FROM versions v
                                       WHERE v.content_id = c.content_id AND v.version = c.version) END AS traceparent
FROM attempt_claim(%(task_id)s, %(lease_token)s, %(worker)s, %(lease_seconds)s, %(rq_job_id)s,
                   %(attempt_seconds)s, %(receipt_store)s, %(calls)s::jsonb) c;

-- tasks_succeed: a worker's success, fenced by its lease, with its asset, its input's release, its dependents'
-- messages, its ledger row and its slot's release (schema: attempt_succeed)
SELECT * FROM attempt_succeed(%(task_id)s, %(lease_token)s, %(actor)s, %(sha256)s, %(media_type)s, %(size)s,
                              %(width)s, %(height)s, %(duration_ms)s, %(reason)s, %(details)s, %(ledger)s,
                              %(slots)s, %(slot)s, %(bulk_slots)s);

-- tasks_heartbeat: extend the lease, only for the current holder before its attempt's end; says whether a
-- cancel was requested
UPDATE tasks t SET lease_until = now() + make_interval(secs => %(lease_seconds)s), heartbeat_at = now()
FROM versions v
WHERE t.id = %(task_id)s AND t.lease_token = %(lease_token)s AND t.status = 'running'
  AND (t.attempt_ends_at IS NULL OR now() < t.attempt_ends_at)   -- past its ceiling, an attempt is let go
  AND v.content_id = t.content_id AND v.version = t.version
RETURNING t.lease_until, v.cancel_requested_at IS NOT NULL AS cancel_requested;

-- tasks_lease_look: whether the lease is still held and for how long, and whether a cancel was requested;
-- a read, so the check right before a paid call writes nothing while the lease is fresh
SELECT extract(epoch FROM t.lease_until - now())::float AS seconds_left,
       v.cancel_requested_at IS NOT NULL AS cancel_requested
FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.id = %(task_id)s AND t.lease_token = %(lease_token)s AND t.status = 'running'
  AND (t.attempt_ends_at IS NULL OR now() < t.attempt_ends_at);

-- tasks_lock_settling: lock a task being settled with, in id order, its dependents (a success releases them
-- exactly once) and the tasks waiting for its input (schema: tasks_lock_settling)
SELECT tasks_lock_settling(%(task_id)s, %(dependents)s, %(input_waiters)s);

-- tasks_move: the one guarded move that applies a decision (pipeline.tasks.apply), with its event. It matches
-- only while the task is as its mover saw it: in `from_status` and, when running, under `lease_token`. The
-- `fence` says who moves: a 'worker' holds the current lease, and a cancel requested meanwhile wins over
-- anything but a cancel; the 'reconciler' saw the lease run out, so a heartbeat in between wins.
WITH moved AS (
    UPDATE tasks SET status = %(to_status)s, lease_token = NULL, lease_until = NULL, updated_at = now(),
           asset_sha256 = coalesce(%(asset_sha256)s, asset_sha256),
           available_at = coalesce(%(available_at)s, available_at),
           attempts = attempts - %(refund)s::int,
           last_error = %(last_error)s, last_error_code = %(last_error_code)s, waiting_for = %(waiting_for)s
    WHERE id = %(task_id)s AND status = %(from_status)s
      AND (status <> 'running'
           OR (lease_token = %(lease_token)s AND (%(fence)s::text = 'worker' OR lease_until < now())))
      AND (%(fence)s::text <> 'worker' OR %(to_status)s::task_status = 'cancelled' OR NOT EXISTS (
            SELECT 1 FROM versions v WHERE v.content_id = tasks.content_id AND v.version = tasks.version
              AND v.cancel_requested_at IS NOT NULL))
    RETURNING *
), logged AS (
    INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt,
                        lease_token, reason, details)
    SELECT id, content_id, version, %(event)s, %(from_status)s, status, %(actor)s, attempts, %(lease_token)s,
           %(reason)s, %(details)s FROM moved
)
SELECT * FROM moved;

-- tasks_fail_past_deadline: these waiting tasks, if their deadline passed, fail without running, with a dead
-- letter (a worker whose claim found nothing passes its one task; the reconciler a batch, in id order); a task
-- of a paused lane does not (its deadline moves on when the lane resumes)
WITH moved AS (
    UPDATE tasks t SET waiting_for = NULL, status = 'failed', last_error = %(last_error)s,
           last_error_code = 'deadline_passed', updated_at = now()
    FROM (SELECT x.id, x.status FROM tasks x JOIN versions v ON v.content_id = x.content_id AND v.version = x.version
          WHERE x.id = ANY(%(ids)s) AND x.status IN ('ready', 'retry') AND x.deadline_at <= now()
            AND NOT lane_paused(v.lane)
          ORDER BY x.id FOR NO KEY UPDATE OF x) old
    WHERE t.id = old.id
    RETURNING t.*, old.status AS from_status
), dead AS (
    INSERT INTO dead_letters (task_id, reason, last_error, attempts)
    SELECT id, 'deadline passed', last_error, attempts FROM moved ON CONFLICT (task_id) WHERE replayed_at IS NULL DO NOTHING
), dropped AS (
    DELETE FROM outbox o USING moved WHERE o.task_id = moved.id AND o.sent_at IS NULL
), logged AS (
    INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, reason)
    SELECT id, content_id, version, 'transition', from_status, 'failed', %(actor)s, attempts, 'deadline passed'
    FROM moved
)
SELECT * FROM moved;

-- tasks_supersede_older: every unfinished task of this content's older versions becomes superseded
-- (a running one loses its lease here, so its worker's fenced completion will match no row). Like every
-- statement that locks several tasks, in id order (a completion: tasks_lock_settling), so the two wait for each
-- other instead of deadlocking (tests/integration/engine/test_lock_order.py)
WITH old AS (
    SELECT id, status FROM tasks
    WHERE content_id = %(content_id)s AND version < %(version)s
      AND status IN ('ready', 'running', 'retry', 'unknown')
    ORDER BY id FOR NO KEY UPDATE
), moved AS (
    UPDATE tasks t SET waiting_for = NULL, status = 'superseded', lease_token = NULL, lease_until = NULL, updated_at = now()
    FROM old WHERE t.id = old.id
    RETURNING t.id, t.content_id, t.version, t.attempts, old.status AS from_status
), dropped AS (
    DELETE FROM outbox o USING moved WHERE o.task_id = moved.id AND o.sent_at IS NULL
)
INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, reason)
SELECT id, content_id, version, 'transition', from_status, 'superseded', %(actor)s, attempts, %(reason)s
FROM moved
RETURNING task_id;

-- tasks_of_version_locked: a version's tasks' kinds and statuses, locked (in id order) so a cancel decides on
-- what stays
SELECT kind::text AS kind, status::text AS status FROM tasks
WHERE content_id = %(content_id)s AND version = %(version)s ORDER BY id FOR NO KEY UPDATE;

-- tasks_cancel_waiting: a cancelled version's waiting tasks are cancelled at once
WITH moved AS (
    UPDATE tasks t SET waiting_for = NULL, status = 'cancelled', updated_at = now()
    FROM (SELECT id, status FROM tasks WHERE content_id = %(content_id)s AND version = %(version)s
          AND status IN ('ready', 'retry', 'unknown') ORDER BY id FOR NO KEY UPDATE) old
    WHERE t.id = old.id
    RETURNING t.id, t.content_id, t.version, t.attempts, old.status AS from_status
), dropped AS (
    DELETE FROM outbox o USING moved WHERE o.task_id = moved.id AND o.sent_at IS NULL
)
INSERT INTO events (task_id, content_id, version, action, from_status, to_status, actor, attempt, reason)
SELECT id, content_id, version, 'transition', from_status, 'cancelled', %(actor)s, attempts, 'version cancelled'
FROM moved
RETURNING task_id;

-- tasks_manual_retry: an editor reopens a failed or unknown task of the current, uncancelled version,
-- with a fresh attempt budget and a fresh deadline (an old deadline would fail it again at once)
UPDATE tasks t SET waiting_for = NULL, status = 'ready', max_attempts = t.attempts + %(budget)s, available_at = now(),
       deadline_at = greatest(t.deadline_at, now() + make_interval(secs => %(deadline_seconds)s)),
       updated_at = now()
FROM contents c, versions v
WHERE t.id = %(task_id)s AND t.status = %(from_status)s
  AND c.id = t.content_id AND c.current_version = t.version
  AND v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
RETURNING t.*;

-- tasks_extend_waiting_dependents: tasks still waiting on a reopened task get its fresh deadline too
UPDATE tasks t SET deadline_at = greatest(t.deadline_at, %(deadline_at)s), updated_at = now()
FROM task_deps d
WHERE d.depends_on = %(task_id)s AND t.id = d.task_id AND t.status IN ('ready', 'retry')
RETURNING t.id;

-- tasks_resolve_failed: an editor closes an unknown task as failed, with a dead letter naming the note
WITH moved AS (
    UPDATE tasks SET waiting_for = NULL, status = 'failed', last_error = %(last_error)s,
           last_error_code = 'resolved', updated_at = now()
    WHERE id = %(task_id)s AND status = 'unknown'
    RETURNING *
), dead AS (
    INSERT INTO dead_letters (task_id, reason, last_error, attempts)
    SELECT id, 'resolved as failed by an editor', last_error, attempts FROM moved
    ON CONFLICT (task_id) WHERE replayed_at IS NULL DO UPDATE SET reason = excluded.reason, last_error = excluded.last_error,
        attempts = excluded.attempts, at = now()
)
SELECT * FROM moved;

-- tasks_paused_by_budget: tasks waiting for a budget, of a team's contents (NULL: all), per kind (read through the
-- unfinished-task index)
SELECT kind::text AS kind, count(*) AS n FROM tasks
WHERE status = 'retry' AND waiting_for = 'budget'
  AND (%(team)s::text IS NULL OR content_id IN (SELECT c.id FROM contents c WHERE c.team = %(team)s))
GROUP BY 1;

-- dead_letters_insert: the record of a task that failed for good
INSERT INTO dead_letters (task_id, reason, last_error, attempts)
VALUES (%(task_id)s, %(reason)s, %(last_error)s, %(attempts)s)
ON CONFLICT (task_id) WHERE replayed_at IS NULL DO UPDATE SET reason = excluded.reason, last_error = excluded.last_error,
    attempts = excluded.attempts, at = now();

-- dead_letters_take: drop a task's dead letter when an editor reopens it (the retry event keeps its content)
DELETE FROM dead_letters WHERE task_id = %(task_id)s AND replayed_at IS NULL
RETURNING reason, last_error, attempts, at::text AS at;

-- tasks_rerun: an editor reruns a dead-lettered (failed) task of the current, uncancelled version: a new
-- run with `budget` more attempts; the deadline is the one decided (pipeline.core.rerun), never moved silently
UPDATE tasks t SET waiting_for = NULL, status = 'ready', max_attempts = t.attempts + %(budget)s,
       available_at = now(), deadline_at = %(deadline_at)s, updated_at = now()
FROM contents c, versions v
WHERE t.id = %(task_id)s AND t.status = 'failed'
  AND c.id = t.content_id AND c.current_version = t.version
  AND v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
RETURNING t.*;
