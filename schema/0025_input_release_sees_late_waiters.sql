-- input_calls_release wakes the tasks parked for the input it releases. It did so in the statement that deleted the
-- hold, from that statement's snapshot: a task that parked while the delete waited for the lock the park held on the
-- hold was not in it, and slept until its own timer (a lease in the synchronous lane, up to a day behind a batch
-- line). The wake is now a statement of its own, after the delete, so it reads a snapshot taken once the delete has
-- its lock, and sees that task. Same signature: a worker of the release before calls it unchanged.
CREATE OR REPLACE FUNCTION input_calls_release(p_fingerprint text, p_lease_token uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM input_calls WHERE fingerprint = p_fingerprint AND lease_token = p_lease_token;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    WITH waiting AS (
        SELECT t.id FROM tasks t
        WHERE t.fingerprint = p_fingerprint AND t.status = 'retry' AND t.waiting_for = 'input'
        ORDER BY t.id FOR NO KEY UPDATE OF t
    ), woken AS (
        UPDATE tasks t SET available_at = now() FROM waiting WHERE t.id = waiting.id
        RETURNING t.id
    )
    UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL;
END
$$;
