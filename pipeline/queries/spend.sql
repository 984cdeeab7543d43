-- input_calls_take: hold the right to call for this input, unless a live holder has it; returns the holder
-- (a holder is live while its lease is renewed, or while its task is running or unknown: a crashed
-- holder is released only by the reconciler's decision, and an unknown one only by a person's)
INSERT INTO input_calls AS i (fingerprint, task_id, lease_token, held_until)
VALUES (%(fingerprint)s, %(task_id)s, %(lease_token)s, now() + make_interval(secs => %(hold_seconds)s))
ON CONFLICT (fingerprint) DO UPDATE
    SET task_id = excluded.task_id, lease_token = excluded.lease_token, held_until = excluded.held_until,
        since = now()
    WHERE i.task_id = excluded.task_id
       OR (i.held_until < now()
           AND NOT EXISTS (SELECT 1 FROM tasks t WHERE t.id = i.task_id AND t.status IN ('running', 'unknown')))
RETURNING task_id;

-- input_calls_holder: who holds an input now, locked so that its release waits for our decision to wait
SELECT i.task_id, i.held_until, t.status::text AS holder_status FROM input_calls i JOIN tasks t ON t.id = i.task_id
WHERE i.fingerprint = %(fingerprint)s
FOR SHARE OF i;

-- input_calls_renew: the holder's call still runs
UPDATE input_calls SET held_until = now() + make_interval(secs => %(hold_seconds)s)
WHERE fingerprint = %(fingerprint)s AND lease_token = %(lease_token)s;

-- input_calls_release: the holder is done with the input (its asset is stored, or nothing was paid)
DELETE FROM input_calls WHERE fingerprint = %(fingerprint)s AND lease_token = %(lease_token)s
RETURNING fingerprint;

-- tasks_wake_input_waiters: tasks waiting for this input may run now (their messages are due at once)
WITH woken AS (
    UPDATE tasks SET available_at = now()
    WHERE fingerprint = %(fingerprint)s AND status = 'retry' AND waiting_for = 'input'
    RETURNING id
)
UPDATE outbox o SET available_at = now() FROM woken WHERE o.task_id = woken.id AND o.sent_at IS NULL;

-- spend_days_ensure: today's row for a provider exists (UTC days)
INSERT INTO spend_days (provider, day) VALUES (%(provider)s, (now() AT TIME ZONE 'UTC')::date)
ON CONFLICT DO NOTHING;

-- spend_days_book: book one call's cost today, only if it keeps the provider within its daily limit
-- (the row lock serialises racing workers; the limit is re-checked on the row they wait for)
UPDATE spend_days SET spent = spent + %(cost)s, calls = calls + 1
WHERE provider = %(provider)s AND day = (now() AT TIME ZONE 'UTC')::date
  AND (%(limit)s::numeric IS NULL OR spent + %(cost)s <= %(limit)s::numeric)
RETURNING spent, day;

-- spend_days_today: what a provider has booked today
SELECT coalesce((SELECT spent FROM spend_days WHERE provider = %(provider)s
                 AND day = (now() AT TIME ZONE 'UTC')::date), 0)::float AS spent;

-- spend_days_refund: give back a booking whose call provably cost nothing
UPDATE spend_days SET spent = greatest(spent - %(cost)s, 0), calls = greatest(calls - 1, 0)
WHERE provider = %(provider)s AND day = %(day)s;

-- content_spend_ensure: the content's row exists
INSERT INTO content_spend (content_id) VALUES (%(content_id)s) ON CONFLICT DO NOTHING;

-- content_spend_book: book one call's cost against the content, only within its limit
UPDATE content_spend SET spent = spent + %(cost)s, calls = calls + 1
WHERE content_id = %(content_id)s AND (%(limit)s::numeric IS NULL OR spent + %(cost)s <= %(limit)s::numeric)
RETURNING spent;

-- content_spend_refund: give back a content's booking whose call provably cost nothing
UPDATE content_spend SET spent = greatest(spent - %(cost)s, 0), calls = greatest(calls - 1, 0)
WHERE content_id = %(content_id)s;

-- spend_days_of_today: every provider's bookings today (UTC day)
SELECT provider, spent::float AS spent, calls FROM spend_days
WHERE day = (now() AT TIME ZONE 'UTC')::date ORDER BY provider;

-- tasks_paused_by_budget: tasks waiting for a budget, per kind (read through the unfinished-task index)
SELECT kind::text AS kind, count(*) AS n FROM tasks WHERE status = 'retry' AND waiting_for = 'budget' GROUP BY 1;

-- provider_calls_summary_since: the call ledger since a time, per provider and outcome
SELECT provider, outcome, count(*) AS n, coalesce(sum(cost), 0)::float AS cost FROM provider_calls
WHERE at >= %(since)s GROUP BY 1, 2 ORDER BY 1, 2;

-- provider_calls_summary_of_content: one content's call ledger, per provider and outcome
SELECT pc.provider, pc.outcome, count(*) AS n, coalesce(sum(pc.cost), 0)::float AS cost
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE t.content_id = %(content_id)s GROUP BY 1, 2 ORDER BY 1, 2;

-- provider_calls_duplicates: paid calls (since a time, of one content or all) for an input that had been
-- paid for before, with who accepted the risk of paying twice (nobody: an accident to look into)
SELECT pc.id, pc.task_id, pc.provider, pc.outcome, pc.cost::float AS cost, pc.at, t.content_id, t.version,
       t.kind::text AS kind, t.block_key,
       (SELECT e.actor FROM events e WHERE e.task_id = pc.task_id AND e.action = 'duplicate_risk_accepted'
          AND e.attempt < pc.attempt ORDER BY e.id DESC LIMIT 1) AS consented_by
FROM provider_calls pc JOIN tasks t ON t.id = pc.task_id
WHERE pc.outcome IN ('succeeded', 'ambiguous') AND pc.at >= %(since)s
  AND (%(content_id)s::bigint IS NULL OR t.content_id = %(content_id)s)
  AND EXISTS (SELECT 1 FROM tasks t2 JOIN provider_calls p2 ON p2.task_id = t2.id
              WHERE t2.fingerprint = t.fingerprint AND p2.outcome IN ('succeeded', 'ambiguous') AND p2.id < pc.id)
ORDER BY pc.id DESC LIMIT 200;
