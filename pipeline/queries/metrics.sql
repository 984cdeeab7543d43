-- Gauges for /metrics, and the counters the triggers keep (schema/0002_security.sql).

-- metrics_tasks_by_status: tasks that still need a worker or a person, by status and kind; the partial
-- indexes tasks_unfinished and tasks_failed serve it, so finished history is never scanned
SELECT status::text AS status, kind::text AS kind, count(*) AS n FROM tasks
WHERE status IN ('ready', 'running', 'retry', 'unknown') GROUP BY 1, 2
UNION ALL
SELECT 'failed', kind::text, count(*) FROM tasks WHERE status = 'failed' GROUP BY 2;

-- metrics_snapshot: one row of gauges, read at scrape time so every process reports the same numbers; each
-- part is bounded (partial indexes, the newest reconcile run by id, counters kept by triggers), none scans history
SELECT
    (SELECT extract(epoch FROM now() - min(t.available_at)) FROM tasks t
     WHERE t.status IN ('ready', 'retry') AND t.available_at <= now()
       AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id))::float AS oldest_ready_seconds,
    (SELECT count(*) FROM outbox WHERE sent_at IS NULL) AS outbox_unsent,
    (SELECT count(*) FROM outbox WHERE sent_at IS NULL AND send_attempts >= 3) AS outbox_stuck,
    (SELECT extract(epoch FROM now() - min(created_at)) FROM outbox WHERE sent_at IS NULL)::float
        AS outbox_oldest_seconds,
    (SELECT count(*) FROM tasks WHERE status = 'running' AND lease_until < now()) AS expired_leases,
    (SELECT extract(epoch FROM now() - min(updated_at)) FROM tasks WHERE status = 'running')::float
        AS oldest_running_seconds,
    (SELECT count(*) FROM tasks WHERE status = 'unknown') AS unknown_tasks,
    lane_paused('bulk')::int AS bulk_paused,
    (SELECT sum(n) FROM metric_counters WHERE name = 'retries') AS retries,
    (SELECT sum(n) FROM metric_counters WHERE name = 'manual_retries') AS manual_retries,
    (SELECT sum(n) FROM metric_counters WHERE name = 'duplicate_risk_accepted') AS duplicate_risk_accepted,
    (SELECT extract(epoch FROM now() - finished_at) FROM reconcile_runs
     WHERE finished_at IS NOT NULL AND job = 'reconcile' ORDER BY id DESC LIMIT 1)::float AS reconcile_age_seconds,
    (SELECT extract(epoch FROM finished_at - started_at) FROM reconcile_runs
     WHERE finished_at IS NOT NULL AND job = 'reconcile' ORDER BY id DESC LIMIT 1)::float
        AS reconcile_duration_seconds;

-- metrics_missed_slots: per slot-keyed job, the slots missed: those the runs of the last day recorded (each run
-- counts the gap before it) and those passed since the job's latest run; each read is a few index rows
SELECT j.job, coalesce(recorded.n, 0)
              + greatest(0, floor(extract(epoch FROM now() - latest.slot) / latest.slot_seconds)::int - 1) AS missed
FROM unnest(ARRAY['reconcile', 'retention']) AS j (job)
JOIN LATERAL (SELECT slot, slot_seconds FROM reconcile_runs r WHERE r.job = j.job AND r.slot IS NOT NULL
              ORDER BY r.slot DESC LIMIT 1) latest ON true
LEFT JOIN LATERAL (SELECT sum(r.missed_before) AS n FROM reconcile_runs r
                   WHERE r.job = j.job AND r.slot IS NOT NULL AND r.slot > now() - interval '1 day') recorded ON true;

-- metrics_waits: waits that spend no attempt (busy provider, same input in flight, budget), from the counters
SELECT outcome AS waiting_for, sum(n) AS n FROM metric_counters WHERE name = 'waits' GROUP BY 1;

-- metrics_latency_buckets: the latency histograms' bucket rows (observations per bucket, not cumulative)
SELECT name, provider AS label, outcome AS le, sum(n) AS n, sum(cost)::float AS total FROM metric_counters
WHERE name LIKE 'latency\_%%' GROUP BY 1, 2, 3;

-- metrics_dead_letters: the dead letters of tasks still failed, by reason (read through the failed-task index)
SELECT dl.reason, count(*) AS n FROM tasks t JOIN dead_letters dl ON dl.task_id = t.id AND dl.replayed_at IS NULL
WHERE t.status = 'failed' GROUP BY 1;

-- metrics_calls_by_outcome: the call ledger's counts and costs by provider and outcome, from the counters
-- its trigger keeps (schema/0002_security.sql), never from the ledger itself
SELECT provider, outcome, sum(n) AS n, sum(cost)::float AS cost FROM metric_counters
WHERE name = 'provider_calls' GROUP BY 1, 2;

-- metric_counters_fold: add the rows of database backends that have ended into shard 0, so the counters
-- stay a few rows per label set (a live backend's rows are left alone: it may be adding to them)
WITH gone AS (
    DELETE FROM metric_counters
    WHERE shard <> 0 AND shard NOT IN (SELECT pid FROM pg_stat_activity WHERE pid IS NOT NULL)
    RETURNING name, provider, outcome, n, cost
)
INSERT INTO metric_counters (name, provider, outcome, shard, n, cost)
SELECT name, provider, outcome, 0, sum(n), sum(cost) FROM gone GROUP BY 1, 2, 3
ON CONFLICT (name, provider, outcome, shard)
DO UPDATE SET n = metric_counters.n + EXCLUDED.n, cost = metric_counters.cost + EXCLUDED.cost;

-- metrics_sent_waiting_tasks: due tasks waiting for a worker whose every message was sent, so RQ should hold one
-- (tasks_unfinished serves the status; a task with an unsent message is the dispatcher's, not lost)
SELECT t.id FROM tasks t
WHERE t.status IN ('ready', 'retry') AND t.available_at <= now()
  AND EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NOT NULL)
  AND NOT EXISTS (SELECT 1 FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NULL)
LIMIT %(limit)s;

-- metrics_tasks_needing_a_worker: which of these tasks still need a worker (waiting or running)
SELECT id FROM tasks WHERE id = ANY(%(ids)s) AND status IN ('ready', 'retry', 'running');

-- metrics_oldest_waiting_by_lane: per lane (of the task's latest message, else its version's), the age of the
-- oldest task that is due and runnable but not claimed
SELECT coalesce((SELECT o.lane FROM outbox o WHERE o.task_id = t.id ORDER BY o.id DESC LIMIT 1), v.lane)::text
           AS lane,
       extract(epoch FROM now() - min(t.available_at))::float AS seconds
FROM tasks t JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
WHERE t.status IN ('ready', 'retry') AND t.available_at <= now()
  AND NOT EXISTS (SELECT 1 FROM task_unmet_deps u WHERE u.task_id = t.id)
GROUP BY 1;
