-- The outbox towards RQ: one message per runnable task, sent by the dispatcher (pipeline/dispatch.py).

-- outbox_add: a message for a runnable task, in its version's lane unless `lane` names one; a pending one wins
INSERT INTO outbox (task_id, queue, lane, available_at)
SELECT t.id, t.kind, coalesce(%(lane)s::lane, v.lane), %(available_at)s::timestamptz
FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.id = %(task_id)s
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id, queue, lane, available_at;

-- outbox_add_unblocked: a message for each waiting dependent of this task whose dependencies all succeeded
-- (schema: outbox_add_unblocked); the new rows' ids
SELECT id FROM outbox_add_unblocked(%(task_id)s) AS id;

-- outbox_add_missing_unblocked: queue dependents whose dependencies all succeeded but got no message
INSERT INTO outbox (task_id, queue, lane, available_at)
SELECT t.id, t.kind, v.lane, now() FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status = 'ready' AND EXISTS (SELECT 1 FROM task_deps d WHERE d.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id)
LIMIT %(limit)s
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id;

-- outbox_redispatch: a fresh message for due, runnable tasks whose message was lost
-- (sent long ago and never claimed, or never written), in the version's lane; at most one pending row per task
INSERT INTO outbox (task_id, queue, lane, available_at)
SELECT t.id, t.kind, v.lane, now() FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version AND v.cancel_requested_at IS NULL
WHERE t.status IN ('ready', 'retry') AND t.available_at <= now() - make_interval(secs => %(threshold)s)
  AND t.attempts < t.max_attempts AND t.deadline_at > now()
  AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id
                  AND (o.sent_at IS NULL OR o.sent_at > now() - make_interval(secs => %(threshold)s)))
ORDER BY t.available_at LIMIT %(limit)s
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id;

-- outbox_claim: due, unsent interactive rows nobody holds (or whose holder's claim expired), under a fresh claim token
UPDATE outbox o SET claim_token = %(claim_token)s, send_attempts = o.send_attempts + 1,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (SELECT id FROM outbox
      WHERE sent_at IS NULL AND lane = 'interactive' AND available_at <= now()
        AND (claim_until IS NULL OR claim_until < now())
      ORDER BY available_at, id LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id
RETURNING o.id, o.task_id, o.queue, o.lane, o.send_attempts;

-- outbox_claim_ids: claim specific interactive rows (the fast path after a save), unless someone holds them
UPDATE outbox o SET claim_token = %(claim_token)s, send_attempts = o.send_attempts + 1,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (SELECT id FROM outbox
      WHERE id = ANY(%(ids)s) AND sent_at IS NULL AND lane = 'interactive' AND available_at <= now()
        AND (claim_until IS NULL OR claim_until < now())
      FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id
RETURNING o.id, o.task_id, o.queue, o.lane, o.send_attempts;

-- outbox_bulk_try_lock: one dispatcher at a time meters the bulk lane (session lock, released after the enqueue)
SELECT pg_try_advisory_lock(7411004) AS locked;

-- outbox_bulk_unlock: release the bulk lane's metering lock
SELECT pg_advisory_unlock(7411004);

-- outbox_claim_bulk: due bulk rows, teams and then contents taking turns, at most room[kind] rows per kind (0 for a kind it leaves out):
-- each content's oldest row of a kind first, among a team's contents the one whose bulk message of that kind was
-- sent longest ago (or never) first, and among teams likewise the one served longest ago; so a content that
-- arrives behind a big import is served at the next free place, and one team's imports cannot starve another's
UPDATE outbox o SET claim_token = %(claim_token)s, send_attempts = o.send_attempts + 1,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (
    WITH due AS (
        SELECT x.id, x.queue, x.available_at, t.content_id, c.team
        FROM outbox x JOIN tasks t ON t.id = x.task_id JOIN contents c ON c.id = t.content_id
        WHERE x.sent_at IS NULL AND x.lane = 'bulk' AND x.available_at <= now() AND NOT lane_paused('bulk')
          AND (x.claim_until IS NULL OR x.claim_until < now())
    ), served AS (
        SELECT c.content_id, c.queue,
               (SELECT max(s.sent_at) FROM tasks t JOIN outbox s ON s.task_id = t.id
                WHERE t.content_id = c.content_id AND t.kind = c.queue AND s.lane = 'bulk') AS served_at
        FROM (SELECT DISTINCT content_id, queue FROM due) c
    ), turns AS (
        SELECT due.id, due.queue, due.content_id, due.team, served.served_at,
               row_number() OVER (PARTITION BY due.content_id, due.queue ORDER BY due.available_at, due.id) AS turn
        FROM due JOIN served USING (content_id, queue)
    ), team_turns AS (
        SELECT id, queue, team, max(served_at) OVER (PARTITION BY team, queue) AS team_served_at,
               row_number() OVER (PARTITION BY team, queue ORDER BY turn, served_at NULLS FIRST, content_id)
                   AS team_turn
        FROM turns
    ), placed AS (
        SELECT id, queue,
               row_number() OVER (PARTITION BY queue ORDER BY team_turn, team_served_at NULLS FIRST, team) AS place
        FROM team_turns
    )
    SELECT id FROM placed
    WHERE place <= coalesce((%(room)s::jsonb ->> queue::text)::int, 0)
) picked
WHERE o.id = picked.id AND o.sent_at IS NULL AND (o.claim_until IS NULL OR o.claim_until < now())
RETURNING o.id, o.task_id, o.queue, o.lane, o.send_attempts;

-- outbox_commit_async: a claim does not wait for its WAL flush; lost in a crash, it only makes the row be sent
-- again, and a duplicate message claims nothing
SET LOCAL synchronous_commit TO off;

-- outbox_mark_sent: record the enqueue, only for rows this claim still holds (it must not touch the task row: a
-- worker claiming that task right now skips locked rows); a statement of its own (autocommit) whose commit does not
-- wait for its WAL flush: a mark lost in a crash only makes the rows be sent again
UPDATE outbox SET sent_at = now(), rq_job_id = 'task-' || task_id || '-' || id
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
WHERE id = ANY(%(ids)s) AND claim_token = %(claim_token)s AND sent_at IS NULL
RETURNING id;
