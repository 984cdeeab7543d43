-- Webhooks: endpoints per team, their messages (webhook_deliveries, the webhooks' outbox) and every attempt
-- (pipeline/webhooks.py, pipeline/webhook_delivery.py). Events are written by triggers (schema/0028_webhooks.sql).

-- webhook_endpoints_add: register an endpoint of an existing team (no row: no such team)
INSERT INTO webhook_endpoints (team, url, events, description, secret_salt, created_by)
SELECT t.name, %(url)s, %(events)s, %(description)s, %(salt)s, %(by)s FROM teams t WHERE t.name = %(team)s
RETURNING *;

-- webhook_endpoints_list: every endpoint (of one team, or all with NULL), with its messages by status
SELECT e.*,
       (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.status = 'pending') AS pending,
       (SELECT count(*) FROM webhook_deliveries d WHERE d.endpoint_id = e.id AND d.status = 'dead') AS dead,
       (SELECT max(d.delivered_at) FROM webhook_deliveries d WHERE d.endpoint_id = e.id) AS last_delivered_at
FROM webhook_endpoints e
WHERE %(team)s::text IS NULL OR e.team = %(team)s
ORDER BY e.team, e.id;

-- webhook_endpoints_get: one endpoint
SELECT * FROM webhook_endpoints WHERE id = %(endpoint_id)s;

-- webhook_endpoints_rotate: a new secret; the old one is still signed with until `previous_until`
UPDATE webhook_endpoints SET previous_salt = secret_salt, secret_salt = %(salt)s,
       previous_until = now() + make_interval(secs => %(overlap_seconds)s)
WHERE id = %(endpoint_id)s
RETURNING *;

-- webhook_endpoints_disable: no new message for the endpoint, its pending ones dead (webhook_deliveries_kill); a
-- disabled one keeps its first reason
UPDATE webhook_endpoints SET disabled_at = now(), disabled_by = %(by)s, disabled_reason = %(reason)s
WHERE id = %(endpoint_id)s AND disabled_at IS NULL
RETURNING *;

-- webhook_endpoints_enable: the endpoint gets new messages again (dead ones wait for "send again")
UPDATE webhook_endpoints SET disabled_at = NULL, disabled_by = NULL, disabled_reason = NULL
WHERE id = %(endpoint_id)s AND disabled_at IS NOT NULL
RETURNING *;

-- webhook_endpoints_remove: the endpoint and its messages' history, for good
DELETE FROM webhook_endpoints WHERE id = %(endpoint_id)s RETURNING id, team, url;

-- webhook_deliveries_kill: the endpoint's pending messages are dead, with the reason
UPDATE webhook_deliveries SET status = 'dead', dead_at = now(), dead_reason = %(reason)s, lease_token = NULL,
       lease_until = NULL, claim_token = NULL
WHERE endpoint_id = %(endpoint_id)s AND status = 'pending'
RETURNING id;

-- webhook_deliveries_of_endpoint: the endpoint's latest messages, with their event
SELECT d.id, d.status, d.attempts, d.available_at, d.last_status, d.last_error, d.delivered_at, d.dead_at,
       d.dead_reason, d.created_at, ev.type, ev.content_id, ev.version, ev.task_id
FROM webhook_deliveries d JOIN webhook_events ev ON ev.id = d.event_id
WHERE d.endpoint_id = %(endpoint_id)s
ORDER BY d.id DESC LIMIT %(limit)s;

-- webhook_attempts_of_endpoint: the latest attempts at the endpoint's messages
SELECT a.delivery_id, a.attempt, a.started_at, a.latency_ms, a.http_status, a.outcome, a.error
FROM webhook_attempts a JOIN webhook_deliveries d ON d.id = a.delivery_id
WHERE d.endpoint_id = %(endpoint_id)s
ORDER BY a.id DESC LIMIT %(limit)s;

-- webhook_deliveries_resend: send these messages of the endpoint again from now (a new retry window), whatever
-- became of them; pending ones are left as they are
UPDATE webhook_deliveries SET status = 'pending', available_at = now(), window_start = now(), sent_at = NULL,
       claim_token = NULL, claim_until = NULL, delivered_at = NULL, dead_at = NULL, dead_reason = NULL
WHERE endpoint_id = %(endpoint_id)s AND status <> 'pending'
  AND (id = ANY (%(ids)s::bigint[]) OR (%(ids)s::bigint[] IS NULL AND status = 'dead'))
RETURNING id;

-- webhook_deliveries_claim: due messages for the dispatcher, under a claim token: pending and due, and not sent,
-- or sent `lost_seconds` ago and not held by a live worker (a lost RQ message, a worker that died mid-send)
UPDATE webhook_deliveries d SET claim_token = %(claim_token)s, send_attempts = d.send_attempts + 1,
       claim_until = now() + make_interval(secs => %(claim_seconds)s)
FROM (
    SELECT x.id FROM webhook_deliveries x
    WHERE x.status = 'pending' AND x.available_at <= now()
      AND (x.claim_until IS NULL OR x.claim_until < now())
      AND (x.sent_at IS NULL OR (x.sent_at < now() - make_interval(secs => %(lost_seconds)s)
                                 AND (x.lease_until IS NULL OR x.lease_until < now())))
    ORDER BY x.available_at, x.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
) picked
WHERE d.id = picked.id
RETURNING d.id, d.send_attempts;

-- webhook_deliveries_mark_sent: the messages are in RQ, for the rows this claim still holds; a commit that does not
-- wait for its WAL flush, as the outbox's: a mark lost in a crash only sends a message again
UPDATE webhook_deliveries SET sent_at = now()
FROM (SELECT set_config('synchronous_commit', 'off', true)) AS commit_mode
WHERE id = ANY (%(ids)s) AND claim_token = %(claim_token)s AND status = 'pending'
RETURNING id;

-- webhook_deliveries_take: a worker takes a due message under a new lease, one attempt more, with what it sends:
-- its endpoint and event; `previous_lease` is the lease of a worker that took it and never settled it; with `traced`,
-- the traceparent of the save of the event's version (docs/tracing.md)
WITH before AS (
    SELECT id, lease_token FROM webhook_deliveries WHERE id = %(delivery_id)s FOR UPDATE
)
UPDATE webhook_deliveries d SET lease_token = %(lease_token)s, attempts = d.attempts + 1,
       lease_until = now() + make_interval(secs => %(lease_seconds)s)
FROM before, webhook_endpoints e, webhook_events ev
WHERE d.id = before.id AND e.id = d.endpoint_id AND ev.id = d.event_id
  AND d.status = 'pending' AND d.available_at <= now() AND (d.lease_until IS NULL OR d.lease_until < now())
RETURNING d.id, d.attempts, d.window_start, before.lease_token AS previous_lease, now() AS now,
          e.id AS endpoint_id, e.url, e.secret_salt, e.previous_salt, e.previous_until, e.disabled_at,
          ev.id AS event_id, ev.type, ev.team, ev.content_id, ev.version, ev.task_id, ev.data,
          ev.created_at AS event_created_at,
          CASE WHEN %(traced)s THEN (SELECT v.traceparent FROM versions v
                                     WHERE v.content_id = ev.content_id AND v.version = ev.version) END AS traceparent;

-- webhook_attempts_add: one attempt, as it went
INSERT INTO webhook_attempts (delivery_id, attempt, started_at, latency_ms, http_status, outcome, error, worker)
VALUES (%(delivery_id)s, %(attempt)s, %(started_at)s, %(latency_ms)s, %(http_status)s, %(outcome)s, %(error)s,
        %(worker)s);

-- webhook_deliveries_settle: what the attempt made of the message (delivered, retry at `available_at`, dead), only
-- while this worker's lease holds
UPDATE webhook_deliveries SET status = %(status)s, last_status = %(http_status)s, last_error = %(error)s,
       available_at = coalesce(%(available_at)s, available_at), sent_at = NULL, claim_token = NULL,
       claim_until = NULL, lease_token = NULL, lease_until = NULL,
       delivered_at = CASE WHEN %(status)s = 'delivered' THEN now() END,
       dead_at = CASE WHEN %(status)s = 'dead' THEN now() END,
       dead_reason = CASE WHEN %(status)s = 'dead' THEN %(reason)s END
WHERE id = %(delivery_id)s AND lease_token = %(lease_token)s AND status = 'pending'
RETURNING id, status;

-- webhook_events_prune: events older than `days` none of whose messages is still pending, oldest first, a batch at
-- a time; their messages and attempts go with them
DELETE FROM webhook_events e
WHERE e.id IN (SELECT x.id FROM webhook_events x
               WHERE x.created_at < now() - make_interval(days => %(days)s)
                 AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = x.id AND d.status = 'pending')
               ORDER BY x.created_at LIMIT %(limit)s)
RETURNING e.id;
