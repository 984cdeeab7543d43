-- Spend guard: one paid call in flight per input, and budgets counted atomically.

-- Who may call a provider for an input right now. The primary key is the guard: a second
-- task with the same input cannot hold it and waits for the holder (no check-then-act).
-- The holder renews `held_until` while its call runs, even if its task was superseded.
CREATE TABLE input_calls (
    fingerprint text PRIMARY KEY CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    task_id     bigint NOT NULL REFERENCES tasks (id),
    lease_token uuid NOT NULL,
    held_until  timestamptz NOT NULL,
    since       timestamptz NOT NULL DEFAULT now()
);

-- Money booked per provider and UTC day; a call books its cost before it is made.
CREATE TABLE spend_days (
    provider text NOT NULL,
    day      date NOT NULL,
    spent    numeric(14, 6) NOT NULL DEFAULT 0 CHECK (spent >= 0),
    calls    integer NOT NULL DEFAULT 0 CHECK (calls >= 0),
    PRIMARY KEY (provider, day)
);

-- Money booked per content, for the optional per-content limit.
CREATE TABLE content_spend (
    content_id bigint PRIMARY KEY REFERENCES contents (id),
    spent      numeric(14, 6) NOT NULL DEFAULT 0 CHECK (spent >= 0),
    calls      integer NOT NULL DEFAULT 0 CHECK (calls >= 0)
);

-- Why a task in `retry` waits without spending attempts: another task is making the same
-- input, or a budget is reached. NULL for an ordinary retry.
ALTER TABLE tasks ADD COLUMN waiting_for text CHECK (waiting_for IN ('input', 'budget'));
ALTER TABLE tasks ADD CONSTRAINT tasks_waiting_only_in_retry CHECK (waiting_for IS NULL OR status = 'retry');

-- A key-honouring provider's answer to a retried key is a replay: booked once, at no new cost.
ALTER TABLE provider_calls DROP CONSTRAINT provider_calls_outcome_check;
ALTER TABLE provider_calls ADD CONSTRAINT provider_calls_outcome_check CHECK (outcome IN
    ('succeeded', 'reused', 'replayed', 'permanent', 'transient', 'ambiguous', 'busy', 'recovered'));
-- The spend page reads today's ledger without scanning its history.
CREATE INDEX provider_calls_by_time ON provider_calls (at);

-- /metrics: a wait that spends no attempt (provider busy, another task making the same input, a
-- budget) is not a retry; count it apart, by what it waits for.
CREATE OR REPLACE FUNCTION metric_count_event() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    waits text := CASE NEW.details->>'error_class'
                      WHEN 'Busy' THEN 'busy' WHEN 'WaitingForInput' THEN 'input'
                      WHEN 'BudgetReached' THEN 'budget' END;
BEGIN
    INSERT INTO metric_counters (name, outcome, shard, n)
    SELECT c.name, c.label, pg_backend_pid(), 1
    FROM (VALUES ('retries', '', NEW.to_status = 'retry' AND waits IS NULL),
                 ('waits', coalesce(waits, ''), NEW.to_status = 'retry' AND waits IS NOT NULL),
                 ('manual_retries', '', NEW.action = 'manual_retry'),
                 ('duplicate_risk_accepted', '', NEW.action = 'duplicate_risk_accepted')) AS c (name, label, counted)
    WHERE c.counted
    ON CONFLICT (name, provider, outcome, shard) DO UPDATE SET n = metric_counters.n + 1;
    RETURN NULL;
END $$;
