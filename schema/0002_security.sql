-- Security: server-side UI sessions, no stored key prefix, per-key save limits, and counters
-- that /metrics reads instead of scanning the event history and the call ledger.

-- A UI session. The cookie carries a random token; only its sha256 is stored here, so a
-- copy of this table signs nobody in. Sign-out deletes the row; revoking the key deletes
-- its rows; the idle timeout and the absolute lifetime end it at the next lookup.
CREATE TABLE web_sessions (
    token_hash text PRIMARY KEY CHECK (token_hash ~ '^[0-9a-f]{64}$'),
    key_id     bigint NOT NULL REFERENCES api_keys (id) ON DELETE CASCADE,
    data       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(data) = 'object'),   -- CSRF token, flashes
    created_at timestamptz NOT NULL DEFAULT now(),
    seen_at    timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL,
    CHECK (expires_at > created_at)
);
CREATE INDEX web_sessions_by_key ON web_sessions (key_id);
CREATE INDEX web_sessions_by_expiry ON web_sessions (expires_at);

-- The first characters of a supplied key are part of the secret: keep none of them.
ALTER TABLE api_keys DROP COLUMN key_prefix;

-- Which key saved a version (0: the demo door), for the per-key limits. No foreign key:
-- the demo door has no key row, and a version outlives the key that saved it.
ALTER TABLE versions ADD COLUMN saved_by_key bigint;
CREATE INDEX versions_by_key ON versions (saved_by_key, saved_at) WHERE saved_by_key IS NOT NULL;

-- Failed tasks wait for a person: /metrics counts them from this index, not from all tasks.
CREATE INDEX tasks_failed ON tasks (kind) WHERE status = 'failed';

-- Monotonic counters for /metrics, kept by the triggers below. Each database backend adds
-- to rows of its own (`shard` is its process id), so concurrent transactions never wait on
-- each other here and cannot deadlock; a scrape sums a few rows per label set.
CREATE TABLE metric_counters (
    name     text NOT NULL,
    provider text NOT NULL DEFAULT '',
    outcome  text NOT NULL DEFAULT '',
    shard    integer NOT NULL,
    n        bigint NOT NULL DEFAULT 0,
    cost     numeric(18, 6) NOT NULL DEFAULT 0,
    PRIMARY KEY (name, provider, outcome, shard)
);

CREATE FUNCTION metric_count_event() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO metric_counters (name, shard, n)
    SELECT c.name, pg_backend_pid(), 1
    FROM (VALUES ('retries', NEW.to_status = 'retry'),
                 ('manual_retries', NEW.action = 'manual_retry'),
                 ('duplicate_risk_accepted', NEW.action = 'duplicate_risk_accepted')) AS c (name, counted)
    WHERE c.counted
    ON CONFLICT (name, provider, outcome, shard) DO UPDATE SET n = metric_counters.n + 1;
    RETURN NULL;
END $$;

CREATE TRIGGER events_metric_counters AFTER INSERT ON events FOR EACH ROW
    WHEN (NEW.to_status = 'retry' OR NEW.action IN ('manual_retry', 'duplicate_risk_accepted'))
    EXECUTE FUNCTION metric_count_event();

CREATE FUNCTION metric_count_call() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO metric_counters (name, provider, outcome, shard, n, cost)
    VALUES ('provider_calls', NEW.provider, NEW.outcome, pg_backend_pid(), 1, NEW.cost)
    ON CONFLICT (name, provider, outcome, shard)
    DO UPDATE SET n = metric_counters.n + 1, cost = metric_counters.cost + EXCLUDED.cost;
    RETURN NULL;
END $$;

CREATE TRIGGER provider_calls_metric_counters AFTER INSERT ON provider_calls FOR EACH ROW
    EXECUTE FUNCTION metric_count_call();

-- What happened before this migration, counted once (shard 0 belongs to no backend).
INSERT INTO metric_counters (name, shard, n)
SELECT 'retries', 0, count(*) FROM events WHERE to_status = 'retry'
UNION ALL SELECT 'manual_retries', 0, count(*) FROM events WHERE action = 'manual_retry'
UNION ALL SELECT 'duplicate_risk_accepted', 0, count(*) FROM events WHERE action = 'duplicate_risk_accepted';
INSERT INTO metric_counters (name, provider, outcome, shard, n, cost)
SELECT 'provider_calls', provider, outcome, 0, count(*), coalesce(sum(cost), 0)
FROM provider_calls GROUP BY provider, outcome;
