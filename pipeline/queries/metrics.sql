-- metrics_tasks_by_status: task counts by status and kind
SELECT status::text AS status, kind::text AS kind, count(*) AS n FROM tasks GROUP BY 1, 2;

-- metrics_snapshot: one row of gauges, read at scrape time so every process reports the same numbers
-- (the event counts scan events; fine at scrape intervals, an index on action would be the next step)
SELECT
    (SELECT extract(epoch FROM now() - min(t.available_at)) FROM tasks t
     WHERE t.status IN ('ready', 'retry') AND t.available_at <= now()
       AND NOT EXISTS (SELECT 1 FROM task_deps d JOIN tasks x ON x.id = d.depends_on
                       WHERE d.task_id = t.id AND x.status <> 'succeeded'))::float AS oldest_ready_seconds,
    (SELECT count(*) FROM outbox WHERE sent_at IS NULL) AS outbox_unsent,
    (SELECT extract(epoch FROM now() - min(created_at)) FROM outbox WHERE sent_at IS NULL)::float
        AS outbox_oldest_seconds,
    (SELECT count(*) FROM tasks WHERE status = 'running' AND lease_until < now()) AS expired_leases,
    (SELECT count(*) FROM tasks WHERE status = 'unknown') AS unknown_tasks,
    (SELECT count(*) FROM events WHERE to_status = 'retry') AS retries,
    (SELECT count(*) FROM events WHERE action = 'manual_retry') AS manual_retries,
    (SELECT count(*) FROM events WHERE action = 'duplicate_risk_accepted') AS duplicate_risk_accepted,
    (SELECT extract(epoch FROM now() - max(finished_at)) FROM reconcile_runs)::float AS reconcile_age_seconds,
    (SELECT extract(epoch FROM finished_at - started_at) FROM reconcile_runs
     WHERE finished_at IS NOT NULL ORDER BY id DESC LIMIT 1)::float AS reconcile_duration_seconds;

-- metrics_calls_by_outcome: the call ledger summed by provider and outcome
SELECT provider, outcome, count(*) AS n, coalesce(sum(cost), 0)::float AS cost FROM provider_calls GROUP BY 1, 2;
