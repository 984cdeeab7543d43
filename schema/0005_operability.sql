-- Operability: latency histograms for /metrics, and outbox rows that count their send attempts.
--
-- Latency histograms are kept like the other counters (schema/0002_security.sql): the
-- events trigger adds each observation to a bucket row of its backend, so a scrape reads a few
-- rows and never the event history. Rows of metric_counters with a histogram's name use
-- `provider` for the label (a task kind, or a lane), `outcome` for the bucket's upper bound
-- in seconds ('+Inf' last), `n` for the observations in that bucket alone, `cost` for their sum.

CREATE FUNCTION metric_bucket(seconds double precision) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce((SELECT b::text FROM unnest(ARRAY[0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800,
                                                      3600]::numeric[]) AS b
                     WHERE seconds <= b ORDER BY b LIMIT 1), '+Inf')
$$;

CREATE FUNCTION metric_observe(name text, label text, seconds double precision) RETURNS void LANGUAGE sql AS $$
    INSERT INTO metric_counters (name, provider, outcome, shard, n, cost)
    VALUES (name, label, metric_bucket(greatest(seconds, 0)), pg_backend_pid(), 1, greatest(seconds, 0))
    ON CONFLICT (name, provider, outcome, shard)
    DO UPDATE SET n = metric_counters.n + 1, cost = metric_counters.cost + EXCLUDED.cost
$$;

-- accepted -> started (a task's first claim after its version was saved), run time per kind
-- (claim to the end of that attempt), save -> all done per lane (the bundle, the last task, succeeds)
CREATE FUNCTION metric_observe_latency() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    task tasks%ROWTYPE;
    saved timestamptz;
    lane_of text;
    claimed timestamptz;
BEGIN
    SELECT * INTO task FROM tasks WHERE id = NEW.task_id;
    SELECT v.saved_at, v.lane::text INTO saved, lane_of FROM versions v
    WHERE v.content_id = task.content_id AND v.version = task.version;
    IF NEW.to_status = 'running' AND NEW.attempt = 1 THEN
        PERFORM metric_observe('latency_accepted_to_started', task.kind::text, extract(epoch FROM NEW.at - saved));
    ELSIF NEW.from_status = 'running' THEN
        SELECT e.at INTO claimed FROM events e
        WHERE e.task_id = NEW.task_id AND e.to_status = 'running' AND e.id < NEW.id ORDER BY e.id DESC LIMIT 1;
        IF claimed IS NOT NULL THEN
            PERFORM metric_observe('latency_run', task.kind::text, extract(epoch FROM NEW.at - claimed));
        END IF;
        IF NEW.to_status = 'succeeded' AND task.kind = 'bundle' THEN
            PERFORM metric_observe('latency_save_to_done', lane_of, extract(epoch FROM NEW.at - saved));
        END IF;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER events_latency AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.task_id IS NOT NULL AND (NEW.to_status = 'running' OR NEW.from_status = 'running'))
    EXECUTE FUNCTION metric_observe_latency();

-- Each claim of an outbox row for sending counts one attempt, so a row that keeps failing to
-- reach Redis is visible (/metrics: mediapipe_outbox_stuck) instead of being retried in silence.
ALTER TABLE outbox ADD COLUMN send_attempts integer NOT NULL DEFAULT 0 CHECK (send_attempts >= 0);

-- Every attempt ends: the claim fixes when (its ceiling, never past the task's deadline); the
-- heartbeat renews the lease only before then, so a stuck attempt loses its lease and the
-- reconciler moves the task on by the usual evidence rules.
ALTER TABLE tasks ADD COLUMN attempt_ends_at timestamptz;
