-- The call ledger (provider_calls): one row per provider call, reuse or replay, with its cost.

-- provider_calls_insert: one row of the call ledger
INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, http_status,
                            latency_ms, cost, accepted_by, estimated_cost, reported_cost, list_cost, usage, batch_id)
VALUES (%(task_id)s, %(attempt)s, %(provider)s, %(model)s, %(idempotency_key)s, %(outcome)s, %(http_status)s,
        %(latency_ms)s, %(cost)s, %(accepted_by)s, %(estimated_cost)s, %(reported_cost)s, %(list_cost)s, %(usage)s,
        %(batch_id)s);

-- provider_calls_key_charged: an earlier call with this idempotency key may have been charged
SELECT EXISTS (SELECT 1 FROM provider_calls WHERE idempotency_key = %(idempotency_key)s
               AND outcome = 'ambiguous' AND cost > 0) AS charged;

-- provider_calls_summary_since: the call ledger since a time (of a team's contents, or all), per provider and outcome
SELECT provider, outcome, call_may_have_charged(outcome) AS charged, count(*) AS n, coalesce(sum(cost), 0)::float AS cost,
       coalesce(sum(estimated_cost), 0)::float AS estimated, coalesce(sum(reported_cost), 0)::float AS reported,
       count(reported_cost) AS with_reported, count(batch_id) AS batch_lines,
       coalesce(sum(list_cost - cost) FILTER (WHERE batch_id IS NOT NULL), 0)::float AS batch_savings
FROM provider_calls pc
WHERE at >= %(since)s
  AND (%(team)s::text IS NULL OR EXISTS (SELECT 1 FROM tasks t JOIN contents c ON c.id = t.content_id
                                         WHERE t.id = pc.task_id AND c.team = %(team)s))
GROUP BY 1, 2 ORDER BY 1, 2;

-- provider_calls_summary_of_content: one content's call ledger, per provider and outcome
SELECT pc.provider, pc.outcome, call_may_have_charged(pc.outcome) AS charged, count(*) AS n, coalesce(sum(pc.cost), 0)::float AS cost,
       coalesce(sum(pc.estimated_cost), 0)::float AS estimated, coalesce(sum(pc.reported_cost), 0)::float AS reported,
       count(pc.reported_cost) AS with_reported, count(pc.batch_id) AS batch_lines,
       coalesce(sum(pc.list_cost - pc.cost) FILTER (WHERE pc.batch_id IS NOT NULL), 0)::float AS batch_savings
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE t.content_id = %(content_id)s GROUP BY 1, 2 ORDER BY 1, 2;

-- provider_calls_duplicates: paid calls (since a time, of one content, a team's or all) for an input that had been
-- paid for before, with who accepted the risk of paying twice (nobody: an accident to look into)
SELECT pc.id, pc.task_id, pc.provider, pc.outcome, pc.cost::float AS cost, pc.at, t.content_id, t.version,
       t.kind::text AS kind, t.block_key,
       (SELECT e.actor FROM events e WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted'
          AND e.attempt < pc.attempt ORDER BY e.id DESC LIMIT 1) AS consented_by
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE call_may_have_charged(pc.outcome) AND pc.at >= %(since)s
  AND (%(content_id)s::bigint IS NULL OR t.content_id = %(content_id)s)
  AND (%(team)s::text IS NULL OR t.content_id IN (SELECT c.id FROM contents c WHERE c.team = %(team)s))
  AND EXISTS (SELECT 1 FROM tasks t2 JOIN provider_calls p2 ON p2.task_id = t2.id
              WHERE t2.fingerprint = t.fingerprint AND call_may_have_charged(p2.outcome) AND p2.id < pc.id)
ORDER BY pc.id DESC LIMIT 200;

-- provider_calls_of_version: the call ledger of a version; a call made after someone accepted the risk of a
-- duplicate charge for its task names that person (read from the event, so the ledger needs no update)
SELECT pc.id, pc.task_id, pc.attempt, pc.provider, pc.model, pc.outcome, pc.http_status, pc.latency_ms,
       pc.cost, pc.at, t.kind, t.block_key, call_may_have_charged(pc.outcome) AS charged,
       coalesce(pc.accepted_by,
                (SELECT e.actor FROM events e
                 WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted' AND e.attempt < pc.attempt
                 ORDER BY e.id DESC LIMIT 1)) AS accepted_by
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE t.content_id = %(content_id)s AND t.version = %(version)s
ORDER BY pc.id;

-- provider_calls_of_task_view: a task's calls, oldest first, with who accepted a possible duplicate charge
SELECT pc.*, coalesce(pc.accepted_by,
                (SELECT e.actor FROM events e
                 WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted' AND e.attempt < pc.attempt
                 ORDER BY e.id DESC LIMIT 1)) AS consented_by
FROM provider_calls pc WHERE pc.task_id = %(task_id)s ORDER BY pc.id;
