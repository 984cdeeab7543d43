-- The batch lane (pipeline/batches.py): batch lines and the Batch API jobs they go into.

-- batch_lines_enlist: a worker hands its claimed bulk image task's call to the batch lane: the task's lease passes
-- to the line (a new token, held until the task's deadline) with the hold on its input; nothing when the worker's
-- lease is gone
WITH moved AS (
    UPDATE tasks SET lease_token = %(line_token)s, lease_until = deadline_at, attempt_ends_at = deadline_at,
           heartbeat_at = now(), worker = 'batch', updated_at = now()
    WHERE id = %(task_id)s AND lease_token = %(lease_token)s AND status = 'running'
    RETURNING id, content_id, version, attempts, fingerprint, deadline_at
), held AS (
    UPDATE input_calls i SET lease_token = %(line_token)s, held_until = m.deadline_at FROM moved m
    WHERE i.fingerprint = m.fingerprint AND i.lease_token = %(lease_token)s
), logged AS (
    INSERT INTO events (task_id, content_id, version, action, actor, attempt, lease_token, reason)
    SELECT id, content_id, version, 'batched', 'batch', attempts, %(line_token)s,
           'its call waits for a Batch API job' FROM moved
)
INSERT INTO batch_lines (task_id, attempt, lease_token, fingerprint, custom_id, body, model, estimate, list_cost,
                         booked_provider, booked_day, content_id)
SELECT m.id, m.attempts, %(line_token)s, m.fingerprint, %(custom_id)s, %(body)s, %(model)s, %(estimate)s,
       %(list_cost)s, %(booked_provider)s, %(booked_day)s, m.content_id
FROM moved m
RETURNING id;

-- batch_lines_orphaned: waiting lines whose task no longer waits for them (superseded, cancelled), with what
-- settling them needs
SELECT l.* FROM batch_lines l
WHERE l.batch_id IS NULL AND l.settled_at IS NULL
  AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = l.task_id AND t.status = 'running'
                                         AND t.lease_token = l.lease_token);

-- batch_lines_waiting: lines not yet in a batch, oldest first, locked for the gathering transaction
SELECT id, enlisted_at FROM batch_lines WHERE batch_id IS NULL AND settled_at IS NULL
ORDER BY enlisted_at, id LIMIT %(max)s FOR UPDATE SKIP LOCKED;

-- batch_lines_gather: these waiting lines go into the batch
UPDATE batch_lines SET batch_id = %(batch_id)s WHERE id = ANY(%(ids)s) AND batch_id IS NULL;

-- batch_lines_of_batch: a batch's lines, for its input file
SELECT custom_id, body FROM batch_lines WHERE batch_id = %(batch_id)s ORDER BY id;

-- batch_lines_open_of_batch: a batch's unsettled lines, each with its task as a Task record needs it
SELECT l.*, t.version, t.kind::text AS kind, t.block_key, t.input, t.max_attempts, t.deadline_at, t.lease_until,
       t.attempt_ends_at
FROM batch_lines l JOIN tasks t ON t.id = l.task_id
WHERE l.batch_id = %(batch_id)s AND l.settled_at IS NULL ORDER BY l.id;

-- batch_lines_still_wanted: how many of a batch's lines a task still waits for
SELECT count(*) FROM batch_lines l JOIN tasks t ON t.id = l.task_id
WHERE l.batch_id = %(batch_id)s AND l.settled_at IS NULL AND t.status = 'running' AND t.lease_token = l.lease_token;

-- batch_lines_settle: a line is settled (once)
UPDATE batch_lines SET outcome = %(outcome)s, settled_at = now() WHERE id = %(id)s AND settled_at IS NULL;

-- image_batches_insert: a new batch of gathered lines
INSERT INTO image_batches (name, lines) VALUES (%(name)s, %(lines)s) RETURNING id, name;

-- image_batches_due: live batches whose next step is due, oldest first
SELECT * FROM image_batches WHERE status <> 'done' AND next_poll_at <= now() ORDER BY id;

-- image_batches_later: a step failed; try it again after a poll interval
UPDATE image_batches SET next_poll_at = now() + make_interval(secs => %(seconds)s) WHERE id = %(id)s;

-- image_batches_uploaded: its input file is at the provider
UPDATE image_batches SET status = 'uploaded', input_file_id = %(file_id)s WHERE id = %(id)s AND status = 'gathered';

-- image_batches_creating: the create is about to be sent; from now on a batch may exist at the provider
UPDATE image_batches SET status = 'creating' WHERE id = %(id)s AND status = 'uploaded';

-- image_batches_submitted: the provider's batch, by its id
UPDATE image_batches SET status = 'submitted', provider_batch_id = %(provider_batch_id)s,
       provider_status = %(provider_status)s, submitted_at = now(),
       next_poll_at = now() + make_interval(secs => %(seconds)s)
WHERE id = %(id)s AND status = 'creating';

-- image_batches_cancelling: none of its tasks waits for it any more; it was cancelled at the provider
UPDATE image_batches SET status = 'cancelling' WHERE id = %(id)s AND status = 'submitted';

-- image_batches_polled: how the batch stood when asked; ask again after a poll interval
UPDATE image_batches SET provider_status = %(provider_status)s,
       next_poll_at = now() + make_interval(secs => %(seconds)s)
WHERE id = %(id)s;

-- image_batches_done: every line of the batch is settled
UPDATE image_batches SET status = 'done', provider_status = %(provider_status)s, output_file_id = %(output_file_id)s,
       error_file_id = %(error_file_id)s, error = %(error)s, finished_at = now()
WHERE id = %(id)s;

-- image_batches_try_lock: one batcher at a time, the bin/batches process or a reconcile run (a session lock)
SELECT pg_try_advisory_lock(7411005) AS locked;

-- image_batches_unlock: release the batcher's lock
SELECT pg_advisory_unlock(7411005);

-- image_batches_any_live: whether any batch or line is still to be settled
SELECT EXISTS (SELECT 1 FROM batch_lines WHERE settled_at IS NULL) AS live;
