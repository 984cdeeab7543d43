-- Real prices, refused prompts, and the bulk lane's images through the provider's Batch API (pipeline/batches.py).

-- The call ledger keeps what a call was estimated at when it was booked (`estimated_cost`), what the provider's
-- answer reported (`reported_cost`, from its usage; NULL when it reports none), and what the same call costs
-- synchronously (`list_cost`), so a batch line's saving is list_cost - cost. `cost` stays what counts as spent:
-- the reported figure where there is one, else the estimate.
ALTER TABLE provider_calls ADD COLUMN estimated_cost numeric(12, 6), ADD COLUMN reported_cost numeric(12, 6),
    ADD COLUMN list_cost numeric(12, 6), ADD COLUMN usage jsonb, ADD COLUMN batch_id bigint;
ALTER TABLE provider_calls DROP CONSTRAINT provider_calls_outcome_check;
ALTER TABLE provider_calls ADD CONSTRAINT provider_calls_outcome_check CHECK (outcome IN
    ('succeeded', 'reused', 'replayed', 'permanent', 'refused', 'transient', 'ambiguous', 'busy', 'recovered'));

-- An input the provider refused is not sent again unchanged unless a person asks (an editor's retry of the
-- refused task takes its row away, and the retry event says so).
CREATE TABLE refused_inputs (
    fingerprint text PRIMARY KEY CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    task_id     bigint NOT NULL REFERENCES tasks (id),
    message     text NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);

-- One Batch API job: its lines are gathered (`gathered`), the input file uploaded (`uploaded`, with its file id),
-- the create sent (`creating`: from here on a batch may exist at the provider, and it is found by its `name` in
-- the batch's metadata before anything creates another), answered (`submitted`, with the provider's id), polled
-- until it ends, and its output and error files recorded line by line (`done`). `cancelling`: every line's task
-- was superseded or cancelled, so the batch is cancelled at the provider; what it finished is still kept.
CREATE TABLE image_batches (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name             uuid NOT NULL UNIQUE,
    status           text NOT NULL DEFAULT 'gathered'
                     CHECK (status IN ('gathered', 'uploaded', 'creating', 'submitted', 'cancelling', 'done')),
    provider_status  text,
    input_file_id    text,
    provider_batch_id text UNIQUE,
    output_file_id   text,
    error_file_id    text,
    lines            integer NOT NULL CHECK (lines > 0),
    error            text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    submitted_at     timestamptz,
    next_poll_at     timestamptz NOT NULL DEFAULT now(),
    finished_at      timestamptz
);
CREATE INDEX image_batches_live ON image_batches (next_poll_at) WHERE status <> 'done';

-- One line of a batch: one task's one paid call. A worker that claimed a bulk image task and holds its input
-- enlists it (the task stays `running` under the line's lease token until the line is settled); the batcher puts
-- waiting lines into a batch. At most one unsettled line per input, across every batch: the one-call-per-input
-- rule holds for batch lines too.
CREATE TABLE batch_lines (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id       bigint NOT NULL REFERENCES tasks (id),
    attempt       integer NOT NULL,
    lease_token   uuid NOT NULL,
    fingerprint   text NOT NULL,
    custom_id     text NOT NULL,              -- the task's idempotency key
    body          jsonb NOT NULL,             -- the request the line makes (POST /v1/images/generations)
    model         text NOT NULL,
    estimate      numeric(12, 6) NOT NULL,    -- booked before the line was sent (the batch price)
    list_cost     numeric(12, 6) NOT NULL,    -- the same call's synchronous price
    booked_provider text,                     -- the spend booking to settle or give back (NULL: none was made)
    booked_day    date,
    content_id    bigint NOT NULL,
    batch_id      bigint REFERENCES image_batches (id),
    enlisted_at   timestamptz NOT NULL DEFAULT now(),
    outcome       text CHECK (outcome IN ('succeeded', 'failed', 'refused', 'requeued', 'cancelled')),
    settled_at    timestamptz,
    CHECK ((outcome IS NULL) = (settled_at IS NULL)),
    UNIQUE (batch_id, custom_id)
);
CREATE UNIQUE INDEX batch_lines_one_per_input ON batch_lines (fingerprint) WHERE settled_at IS NULL;
CREATE UNIQUE INDEX batch_lines_one_per_task ON batch_lines (task_id) WHERE settled_at IS NULL;
CREATE INDEX batch_lines_waiting ON batch_lines (enlisted_at) WHERE batch_id IS NULL;
CREATE INDEX batch_lines_of_batch ON batch_lines (batch_id);

-- What needs a person also lists the prompts the provider refused ('refused'): rewrite the block, or retry it.
CREATE OR REPLACE VIEW tasks_needing_attention AS
SELECT t.id, t.content_id, t.version, t.kind::text AS kind, t.block_key, t.status::text AS status, t.attempts,
       t.max_attempts, t.last_error, t.last_error_code::text AS last_error_code, t.waiting_for, t.deadline_at,
       t.updated_at, c.title, dl.reason AS dead_letter,
       CASE WHEN v.cancelled_with_key IS NOT NULL THEN 'revoked'
            WHEN t.status = 'unknown' THEN 'unknown'
            WHEN t.status = 'failed' AND t.last_error_code = 'refused' THEN 'refused'
            WHEN t.status = 'failed' THEN 'failed'
            WHEN t.status = 'retry' AND t.waiting_for = 'budget' THEN 'budget'
            ELSE 'stuck' END AS problem
FROM tasks t
JOIN contents c ON c.id = t.content_id AND c.current_version = t.version
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
LEFT JOIN dead_letters dl ON dl.task_id = t.id
WHERE (v.cancel_requested_at IS NULL
       AND (t.status IN ('unknown', 'failed')
            OR (t.status = 'retry' AND t.waiting_for = 'budget')
            OR (t.status IN ('ready', 'running', 'retry') AND t.deadline_at < now())))
   OR (v.cancelled_with_key IS NOT NULL AND t.status = 'cancelled');
