-- Reruns of dead-lettered tasks, and the dead letters they keep (pipeline/rerun.py). The table and columns keep
-- the names they had before the rerun had its own (replays, replay_of, replayed_at, replayed_by, replay_why); the
-- reads give the rerun's names.

-- dead_letters_open_lock: a task's open dead letter (not yet rerun), locked while it is rerun
SELECT id, task_id, reason, last_error, attempts, at FROM dead_letters
WHERE task_id = %(task_id)s AND replayed_at IS NULL FOR UPDATE;

-- dead_letters_mark_replayed: the dead letter stays, marked with who reran it, when and why
UPDATE dead_letters SET replayed_at = now(), replayed_by = %(actor)s, replay_why = %(why)s
WHERE id = %(id)s AND replayed_at IS NULL
RETURNING id, replayed_at;

-- replays_insert: the record of a rerun of a task, pointing at the dead letter of the run it repeats
INSERT INTO replays (task_id, replay_of, first_attempt, max_attempts, replayed_by, why, deadline_before,
                     deadline_after)
VALUES (%(task_id)s, %(replay_of)s, %(first_attempt)s, %(max_attempts)s, %(actor)s, %(why)s, %(deadline_before)s,
        %(deadline_after)s)
RETURNING *;

-- dead_letters_of_task: every dead letter a task ever had, oldest first
SELECT id, reason, last_error, attempts, at, replayed_at AS rerun_at, replayed_by AS rerun_by,
       replay_why AS rerun_why
FROM dead_letters
WHERE task_id = %(task_id)s ORDER BY id;

-- replays_of_task: every rerun of a task, oldest first
SELECT id, replay_of AS rerun_of, first_attempt, max_attempts, replayed_by AS rerun_by, why, deadline_before, deadline_after, at
FROM replays WHERE task_id = %(task_id)s ORDER BY id;
