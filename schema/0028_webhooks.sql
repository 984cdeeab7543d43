-- Webhooks: endpoints registered per team, the events other systems care about, and one delivery per (event,
-- endpoint) that the webhook workers send, signed, at least once (pipeline/webhooks.py, docs/webhooks.md).
--
-- An event is written by triggers on the rows whose change causes it, in the same transaction as the change: a
-- version's bundle succeeding (`version.completed`, and `version.deliverable` when the version is already
-- approved), the content's approved version changing (`version.withdrawn` for the one it had,
-- `version.deliverable` for the new one when complete), a task becoming unknown or failed
-- (`task.needs_attention`), a task parked by a spend limit (`budget.reached`, once per team, kind and UTC day).
-- No code path that makes those changes needs to know about webhooks, and none can forget them.

CREATE TABLE webhook_endpoints (
    id              bigserial PRIMARY KEY,
    team            text NOT NULL REFERENCES teams (name),
    url             text NOT NULL CHECK (url ~ '^https?://' AND length(url) <= 2000),
    events          text[] NOT NULL CHECK (cardinality(events) > 0 AND events <@ ARRAY['version.completed',
                        'version.deliverable', 'version.withdrawn', 'task.needs_attention', 'budget.reached']),
    description     text NOT NULL DEFAULT '' CHECK (length(description) <= 200),
    -- the signing secret is derived from SECRET_KEY and this salt (pipeline/core/webhooks.py): a copy of the
    -- database signs nothing
    secret_salt     text NOT NULL,
    previous_salt   text,                  -- the secret before the last rotation, still signed with until
    previous_until  timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    created_by      text NOT NULL,
    disabled_at     timestamptz,
    disabled_by     text,
    disabled_reason text,
    CHECK ((previous_salt IS NULL) = (previous_until IS NULL)),
    CHECK ((disabled_at IS NULL) = (disabled_reason IS NULL))
);
CREATE INDEX webhook_endpoints_live ON webhook_endpoints (team) WHERE disabled_at IS NULL;

CREATE TABLE webhook_events (
    id         bigserial PRIMARY KEY,
    type       text NOT NULL CHECK (type IN ('version.completed', 'version.deliverable', 'version.withdrawn',
                                             'task.needs_attention', 'budget.reached')),
    team       text NOT NULL,
    content_id bigint,
    version    integer,
    task_id    bigint,
    data       jsonb NOT NULL DEFAULT '{}',   -- thin: ids, statuses, reasons; never a secret or a signed link
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_events_created ON webhook_events (created_at);   -- retention (pipeline/reconcile.py)

-- One message per (event, endpoint): its id is the webhook-id of every attempt. `pending` rows are this table's
-- outbox: the dispatcher claims due ones (claim_token, claim_until), enqueues one RQ message each on the `webhook`
-- queue and marks them sent; a webhook worker takes the row under a lease (lease_token, lease_until), sends, and
-- records the attempt. A row sent but never taken, or taken by a worker that died, is due again once
-- LOST_DISPATCH_SECONDS passed and its lease ran out (pipeline/queries/webhooks.sql, webhook_deliveries_claim).
CREATE TABLE webhook_deliveries (
    id            bigserial PRIMARY KEY,
    event_id      bigint NOT NULL REFERENCES webhook_events (id) ON DELETE CASCADE,
    endpoint_id   bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    status        text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts      integer NOT NULL DEFAULT 0,
    available_at  timestamptz NOT NULL DEFAULT now(),
    window_start  timestamptz NOT NULL DEFAULT now(),   -- retries end WEBHOOK_RETRY_SECONDS after this
    claim_token   uuid,
    claim_until   timestamptz,
    send_attempts integer NOT NULL DEFAULT 0,
    sent_at       timestamptz,
    lease_token   uuid,
    lease_until   timestamptz,
    last_status   integer,
    last_error    text,
    delivered_at  timestamptz,
    dead_at       timestamptz,
    dead_reason   text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (event_id, endpoint_id),
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL)),
    CHECK ((status = 'dead') = (dead_at IS NOT NULL))
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (available_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_of_endpoint ON webhook_deliveries (endpoint_id, id DESC);

-- Every attempt to send a message, as the endpoint's page shows it.
CREATE TABLE webhook_attempts (
    id          bigserial PRIMARY KEY,
    delivery_id bigint NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    started_at  timestamptz NOT NULL,
    latency_ms  integer NOT NULL CHECK (latency_ms >= 0),
    http_status integer,
    outcome     text NOT NULL CHECK (outcome IN ('delivered', 'retry', 'dead', 'gone', 'lost')),
    error       text,
    worker      text
);
CREATE INDEX webhook_attempts_of_delivery ON webhook_attempts (delivery_id, id);

-- Per version, whether its bundle succeeded. A version's completion and its approval are two transactions that
-- may run at once; each upserts this row first, so the second waits for the first to commit and then sees what it
-- did: exactly one of them finds the version both approved and complete and writes `version.deliverable`. Nothing
-- that holds this row's lock waits for a task's, so it adds no deadlock to a completion (docs/decisions.md).
CREATE TABLE webhook_version_marks (
    content_id bigint NOT NULL,
    version    integer NOT NULL,
    completed  boolean NOT NULL DEFAULT false,
    PRIMARY KEY (content_id, version)
);

-- budget.reached is sent once per team, task kind and UTC day.
CREATE TABLE webhook_budget_marks (
    team text NOT NULL,
    day  date NOT NULL,
    kind task_kind NOT NULL,
    PRIMARY KEY (team, day, kind)
);

-- webhook_emit: write an event and one delivery per live endpoint of the team that wants its type; nothing when no
-- endpoint wants it (the id of the event, or NULL)
CREATE FUNCTION webhook_emit(p_type text, p_team text, p_content_id bigint, p_version integer, p_task_id bigint,
                             p_data jsonb) RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_id bigint;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhook_endpoints e
                   WHERE e.team = p_team AND e.disabled_at IS NULL AND p_type = ANY (e.events)) THEN
        RETURN NULL;
    END IF;
    INSERT INTO webhook_events (type, team, content_id, version, task_id, data)
    VALUES (p_type, p_team, p_content_id, p_version, p_task_id, p_data)
    RETURNING id INTO v_id;
    INSERT INTO webhook_deliveries (event_id, endpoint_id)
    SELECT v_id, e.id FROM webhook_endpoints e
    WHERE e.team = p_team AND e.disabled_at IS NULL AND p_type = ANY (e.events)
    ORDER BY e.id;
    RETURN v_id;
END
$$;

-- webhook_task_changed: the events a task's change causes (the trigger's WHEN says which changes call it)
CREATE FUNCTION webhook_task_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_team     text;
    v_approved integer;
BEGIN
    SELECT c.team INTO v_team FROM contents c WHERE c.id = NEW.content_id;
    IF NEW.status = 'succeeded' THEN   -- a bundle: its version's last task
        INSERT INTO webhook_version_marks AS m (content_id, version, completed)
        VALUES (NEW.content_id, NEW.version, true)
        ON CONFLICT (content_id, version) DO UPDATE SET completed = true;
        PERFORM webhook_emit('version.completed', v_team, NEW.content_id, NEW.version, NULL, '{}');
        -- a statement of its own: it sees an approval that committed while the upsert above waited for it
        SELECT c.approved_version INTO v_approved FROM contents c WHERE c.id = NEW.content_id;
        IF v_approved = NEW.version THEN
            PERFORM webhook_emit('version.deliverable', v_team, NEW.content_id, NEW.version, NULL, '{}');
        END IF;
    ELSIF NEW.status IN ('unknown', 'failed') THEN
        PERFORM webhook_emit('task.needs_attention', v_team, NEW.content_id, NEW.version, NEW.id,
                             jsonb_build_object('kind', NEW.kind, 'status', NEW.status,
                                                'reason', NEW.last_error_code, 'block', NEW.block_key));
    ELSIF NEW.waiting_for = 'budget' THEN
        INSERT INTO webhook_budget_marks (team, day, kind)
        VALUES (v_team, (now() AT TIME ZONE 'UTC')::date, NEW.kind)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM webhook_emit('budget.reached', v_team, NEW.content_id, NEW.version, NEW.id,
                                 jsonb_build_object('kind', NEW.kind, 'reason', left(NEW.last_error, 300)));
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_task_changed AFTER UPDATE OF status, waiting_for ON tasks
FOR EACH ROW WHEN ((NEW.status IS DISTINCT FROM OLD.status
                    AND (NEW.status IN ('unknown', 'failed') OR (NEW.status = 'succeeded' AND NEW.kind = 'bundle')))
                   OR (NEW.waiting_for = 'budget' AND OLD.waiting_for IS DISTINCT FROM 'budget'))
EXECUTE FUNCTION webhook_task_changed();

-- webhook_approval_changed: the events a change of the approved version causes
CREATE FUNCTION webhook_approval_changed() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_completed boolean;
BEGIN
    -- the marks of both versions first, lower version first: a completion of either running now is serialised
    -- with this change (see webhook_version_marks)
    INSERT INTO webhook_version_marks AS m (content_id, version)
    SELECT NEW.id, v FROM unnest(ARRAY[OLD.approved_version, NEW.approved_version]) AS v
    WHERE v IS NOT NULL ORDER BY v
    ON CONFLICT (content_id, version) DO UPDATE SET completed = m.completed;
    IF OLD.approved_version IS NOT NULL THEN
        SELECT m.completed INTO v_completed FROM webhook_version_marks m
        WHERE m.content_id = NEW.id AND m.version = OLD.approved_version;
        PERFORM webhook_emit('version.withdrawn', NEW.team, NEW.id, OLD.approved_version, NULL,
                             jsonb_build_object('reason', CASE WHEN NEW.approved_version IS NULL THEN 'withdrawn'
                                                               ELSE 'replaced' END,
                                                'replaced_by', NEW.approved_version,
                                                'was_deliverable', v_completed));
    END IF;
    IF NEW.approved_version IS NOT NULL THEN
        SELECT m.completed INTO v_completed FROM webhook_version_marks m
        WHERE m.content_id = NEW.id AND m.version = NEW.approved_version;
        IF v_completed THEN
            PERFORM webhook_emit('version.deliverable', NEW.team, NEW.id, NEW.approved_version, NULL, '{}');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER webhook_approval_changed AFTER UPDATE OF approved_version ON contents
FOR EACH ROW WHEN (NEW.approved_version IS DISTINCT FROM OLD.approved_version)
EXECUTE FUNCTION webhook_approval_changed();
