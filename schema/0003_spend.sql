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
