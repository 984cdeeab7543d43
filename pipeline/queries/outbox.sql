-- outbox_add: a message to send for a runnable task; a pending one already there wins
INSERT INTO outbox (task_id, queue, available_at)
VALUES (%(task_id)s, %(queue)s, %(available_at)s)
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id, queue, available_at;

-- outbox_add_unblocked: a message for each waiting dependent of this task whose dependencies all succeeded
INSERT INTO outbox (task_id, queue, available_at)
SELECT t.id, t.kind, t.available_at FROM task_deps d JOIN tasks t ON t.id = d.task_id
WHERE d.depends_on = %(task_id)s AND t.status IN ('ready', 'retry')
  AND NOT EXISTS (SELECT 1 FROM task_deps d2 JOIN tasks x ON x.id = d2.depends_on
                  WHERE d2.task_id = t.id AND x.status <> 'succeeded')
ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
RETURNING id, task_id, queue, available_at;

-- outbox_claim: due, unsent rows nobody holds (or whose holder's claim expired), under a fresh claim token
UPDATE outbox o SET claim_token = %(claim_token)s,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (SELECT id FROM outbox
      WHERE sent_at IS NULL AND available_at <= now() AND (claim_until IS NULL OR claim_until < now())
      ORDER BY available_at, id LIMIT %(limit)s
      FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id
RETURNING o.id, o.task_id, o.queue;

-- outbox_claim_ids: claim specific rows (the fast path after a save), unless someone holds them
UPDATE outbox o SET claim_token = %(claim_token)s,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (SELECT id FROM outbox
      WHERE id = ANY(%(ids)s) AND sent_at IS NULL AND available_at <= now()
        AND (claim_until IS NULL OR claim_until < now())
      FOR UPDATE SKIP LOCKED) due
WHERE o.id = due.id
RETURNING o.id, o.task_id, o.queue;

-- outbox_mark_sent: record the enqueue, only for rows this claim still holds
-- (it must not touch the task row: a worker claiming that task right now skips locked rows)
UPDATE outbox SET sent_at = now(), rq_job_id = 'task-' || task_id || '-' || id
WHERE id = ANY(%(ids)s) AND claim_token = %(claim_token)s AND sent_at IS NULL
RETURNING id;

-- outbox_unsent_count: messages waiting to be sent
SELECT count(*) AS unsent, min(created_at) AS oldest FROM outbox WHERE sent_at IS NULL;
