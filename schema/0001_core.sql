-- Core schema: contents and their immutable versions, tasks with dependencies,
-- the outbox towards Redis, the audit trail, dead letters, assets and the call ledger.
-- Invariants live here as enums, CHECKs, foreign keys and partial unique indexes.

CREATE TYPE task_status AS ENUM
    ('ready', 'running', 'retry', 'unknown', 'failed', 'succeeded', 'superseded', 'cancelled');
CREATE TYPE task_kind AS ENUM ('image', 'tts', 'bundle');

CREATE TABLE contents (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    title            text NOT NULL CHECK (length(title) BETWEEN 1 AND 200),
    locale           text NOT NULL CHECK (locale ~ '^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$'),
    theme            text,
    current_version  integer NOT NULL DEFAULT 0 CHECK (current_version >= 0),
    approved_version integer CHECK (approved_version BETWEEN 1 AND current_version),
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE versions (
    content_id          bigint NOT NULL REFERENCES contents (id),
    version             integer NOT NULL CHECK (version >= 1),
    title               text NOT NULL,
    locale              text NOT NULL,
    theme               text,
    blocks              jsonb NOT NULL CHECK (jsonb_typeof(blocks) = 'array'),
    digest              text NOT NULL,
    saved_by            text NOT NULL,
    saved_at            timestamptz NOT NULL DEFAULT now(),
    deadline_at         timestamptz NOT NULL,
    save_key            text UNIQUE,          -- Idempotency-Key of the save that made it
    save_digest         text,                 -- digest of that request's body
    cancel_requested_at timestamptz,
    cancel_requested_by text,
    approved_at         timestamptz,
    approved_by         text,
    PRIMARY KEY (content_id, version),
    CHECK ((save_key IS NULL) = (save_digest IS NULL))
);

CREATE TABLE tasks (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    content_id    bigint NOT NULL,
    version       integer NOT NULL,
    kind          task_kind NOT NULL,
    block_key     text,
    input         jsonb NOT NULL,
    fingerprint   text NOT NULL CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    status        task_status NOT NULL DEFAULT 'ready',
    attempts      integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    max_attempts  integer NOT NULL CHECK (max_attempts >= 1),
    available_at  timestamptz NOT NULL DEFAULT now(),
    deadline_at   timestamptz NOT NULL,
    lease_token   uuid,
    lease_until   timestamptz,
    heartbeat_at  timestamptz,
    worker        text,
    asset_sha256  text,
    last_error    text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (content_id, version) REFERENCES versions (content_id, version),
    UNIQUE NULLS NOT DISTINCT (content_id, version, kind, block_key),
    CHECK ((kind = 'bundle') = (block_key IS NULL)),
    -- a running task always has a lease; no other status keeps one
    CHECK ((status = 'running') = (lease_token IS NOT NULL AND lease_until IS NOT NULL)),
    CHECK (status <> 'succeeded' OR asset_sha256 IS NOT NULL),
    CHECK (attempts <= max_attempts)
);
-- Admission and the reconciler read only unfinished tasks: keep that cheap whatever the history.
CREATE INDEX tasks_unfinished ON tasks (status, available_at)
    WHERE status IN ('ready', 'running', 'retry', 'unknown');
CREATE INDEX tasks_by_version ON tasks (content_id, version);
CREATE INDEX tasks_by_fingerprint ON tasks (fingerprint);

CREATE TABLE task_deps (
    task_id    bigint NOT NULL REFERENCES tasks (id),
    depends_on bigint NOT NULL REFERENCES tasks (id),
    PRIMARY KEY (task_id, depends_on),
    CHECK (task_id <> depends_on)
);
CREATE INDEX task_deps_reverse ON task_deps (depends_on);

CREATE TABLE outbox (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      bigint NOT NULL REFERENCES tasks (id),
    queue        task_kind NOT NULL,
    available_at timestamptz NOT NULL DEFAULT now(),
    created_at   timestamptz NOT NULL DEFAULT now(),
    claim_token  uuid,
    claim_until  timestamptz,
    sent_at      timestamptz,
    rq_job_id    text,
    CHECK (sent_at IS NULL OR claim_token IS NOT NULL)
);
-- At most one unsent message per task: re-dispatch can never pile up rows.
CREATE UNIQUE INDEX outbox_one_pending ON outbox (task_id) WHERE sent_at IS NULL;
CREATE INDEX outbox_due ON outbox (available_at) WHERE sent_at IS NULL;
CREATE INDEX outbox_by_task ON outbox (task_id, sent_at);

CREATE TABLE events (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id     bigint REFERENCES tasks (id),
    content_id  bigint NOT NULL REFERENCES contents (id),
    version     integer,
    action      text NOT NULL,            -- transition, reused, recovered_from_receipt, approve, cancel, ...
    from_status task_status,
    to_status   task_status,
    actor       text NOT NULL,
    attempt     integer,
    lease_token uuid,
    reason      text,
    details     jsonb,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX events_by_task ON events (task_id, id);
CREATE INDEX events_by_content ON events (content_id, version, id);

CREATE TABLE dead_letters (
    task_id    bigint PRIMARY KEY REFERENCES tasks (id),
    reason     text NOT NULL,
    last_error text,
    attempts   integer NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE assets (
    sha256      text PRIMARY KEY CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    media_type  text NOT NULL,
    size        bigint NOT NULL CHECK (size >= 0),
    width       integer,
    height      integer,
    duration_ms integer,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Which input produced which asset: the reuse index.
CREATE TABLE asset_inputs (
    fingerprint text PRIMARY KEY CHECK (fingerprint ~ '^[0-9a-f]{64}$'),
    sha256      text NOT NULL REFERENCES assets (sha256),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX asset_inputs_by_sha ON asset_inputs (sha256);
CREATE INDEX assets_by_age ON assets (created_at);

CREATE TABLE provider_calls (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id         bigint NOT NULL REFERENCES tasks (id),
    attempt         integer NOT NULL,
    provider        text NOT NULL,
    model           text NOT NULL,
    idempotency_key text NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN
                        ('succeeded', 'reused', 'permanent', 'transient', 'ambiguous', 'busy', 'recovered')),
    http_status     integer,
    latency_ms      integer,
    cost            numeric(12, 6) NOT NULL DEFAULT 0,
    accepted_by     text,                 -- who accepted a possible duplicate charge, if anyone
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX provider_calls_by_task ON provider_calls (task_id);
CREATE INDEX provider_calls_by_key ON provider_calls (idempotency_key);

CREATE TABLE reconcile_runs (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    counts      jsonb NOT NULL DEFAULT '{}',
    errors      integer NOT NULL DEFAULT 0
);

-- When slow, periodic reconciler steps (retention) last ran, so each run need not repeat them.
CREATE TABLE reconcile_marks (
    name   text PRIMARY KEY,
    ran_at timestamptz NOT NULL
);

CREATE TABLE api_keys (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner      text NOT NULL CHECK (length(owner) BETWEEN 1 AND 100),
    role       text NOT NULL CHECK (role IN ('editor', 'reviewer', 'admin')),
    key_prefix text NOT NULL,
    key_hash   text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz
);

-- Provider limits shared by every worker on every host: in-flight slots and calls per minute.
CREATE TABLE provider_slots (
    provider   text NOT NULL,
    slot       integer NOT NULL CHECK (slot >= 1),
    holder     uuid,
    held_until timestamptz,
    PRIMARY KEY (provider, slot),
    CHECK ((holder IS NULL) = (held_until IS NULL))
);

CREATE TABLE provider_rate (
    provider text NOT NULL,
    minute   timestamptz NOT NULL,
    calls    integer NOT NULL CHECK (calls >= 0),
    PRIMARY KEY (provider, minute)
);

CREATE INDEX events_by_time ON events (at);
