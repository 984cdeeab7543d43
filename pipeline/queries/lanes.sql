-- Pausing and resuming the bulk lane (pipeline/pauses.py, schema/0018_lane_pauses.sql).

-- lanes_pause: open a pause of the lane, unless one is open (then nothing changes and no row comes back)
INSERT INTO lane_pauses (lane, paused_by) VALUES (%(lane)s::lane, %(by)s)
ON CONFLICT (lane) WHERE resumed_at IS NULL DO NOTHING
RETURNING id, lane::text AS lane, paused_at, paused_by;

-- lanes_resume: close the lane's open pause, and move every waiting task of the lane (and its version) on by the
-- pause's length, so the time it was held back does not count against its deadline
WITH ended AS (
    UPDATE lane_pauses SET resumed_at = now(), resumed_by = %(by)s
    WHERE lane = %(lane)s::lane AND resumed_at IS NULL
    RETURNING id, lane, paused_at, paused_by, resumed_at, resumed_by
), held AS (
    SELECT t.id, t.content_id, t.version, e.resumed_at - e.paused_at AS paused_for
    FROM ended e JOIN versions v ON v.lane = e.lane
    JOIN tasks t ON t.content_id = v.content_id AND t.version = v.version
    WHERE t.status IN ('ready', 'retry')
    ORDER BY t.id FOR NO KEY UPDATE OF t   -- in id order, as every statement that locks several tasks
), moved AS (
    UPDATE tasks t SET deadline_at = t.deadline_at + held.paused_for, updated_at = now()
    FROM held WHERE t.id = held.id
    RETURNING t.id
), versions_moved AS (
    UPDATE versions v SET deadline_at = v.deadline_at + held.paused_for
    FROM (SELECT DISTINCT content_id, version, paused_for FROM held) held
    WHERE v.content_id = held.content_id AND v.version = held.version
)
SELECT e.id, e.lane::text AS lane, e.paused_at, e.paused_by, e.resumed_at, e.resumed_by,
       (SELECT count(*) FROM moved) AS tasks_moved
FROM ended e;

-- lanes_open_pause: the lane's open pause, if any (one row of a partial unique index: every page may ask)
SELECT p.id, p.lane::text AS lane, p.paused_at, p.paused_by
FROM lane_pauses p WHERE p.lane = %(lane)s::lane AND p.resumed_at IS NULL;

-- lanes_waiting: the lane's tasks that wait for a worker (read through the unfinished-task index)
SELECT count(*) AS n FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE v.lane = %(lane)s::lane AND t.status IN ('ready', 'retry');

-- lanes_hold_paused: whether a task's lane is paused; if so, a message for it is held in the outbox until the resume
-- (the bulk dispatch sends nothing of a paused lane), at most one pending message per task as always
WITH paused AS (
    SELECT t.id, t.kind, v.lane
    FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
    WHERE t.id = %(task_id)s AND t.status IN ('ready', 'retry') AND lane_paused(v.lane)
), held AS (
    INSERT INTO outbox (task_id, queue, lane, available_at)
    SELECT id, kind, lane, now() FROM paused
    ON CONFLICT (task_id) WHERE sent_at IS NULL DO NOTHING
)
SELECT EXISTS (SELECT 1 FROM paused) AS paused;
