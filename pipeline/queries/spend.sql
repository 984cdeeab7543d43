-- The spend guard: one paid call in flight per input (input_calls), and budgets per day and content.

-- input_calls_take: hold the right to call for the input of a media task we hold (under `lease_token`), unless the
-- input already has a stored asset or a live holder has it (schema: input_calls_take); the holder's task id. Matches
-- nothing when the lease is not ours
SELECT input_calls_take(%(task_id)s, %(lease_token)s, %(hold_seconds)s) AS task_id;

-- input_calls_holder: who holds an input now, locked so that its release waits for our decision to wait
SELECT i.task_id, i.held_until, t.status::text AS holder_status FROM input_calls i JOIN tasks t ON t.id = i.task_id
WHERE i.fingerprint = %(fingerprint)s
FOR SHARE OF i;

-- input_calls_renew: the holder's call still runs
UPDATE input_calls SET held_until = now() + make_interval(secs => %(hold_seconds)s)
WHERE fingerprint = %(fingerprint)s AND lease_token = %(lease_token)s;

-- input_calls_release: the holder is done with the input (its asset is stored, or nothing was paid); the tasks
-- waiting for it may run now (schema: input_calls_release)
SELECT input_calls_release(%(fingerprint)s, %(lease_token)s);

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

-- spend_days_settle: a booked call's estimate becomes the figure the provider reported (`delta`: reported - booked)
UPDATE spend_days SET spent = greatest(spent + %(delta)s, 0) WHERE provider = %(provider)s AND day = %(day)s;

-- spend_days_of_today: every provider's bookings today (UTC day)
SELECT provider, spent::float AS spent, calls FROM spend_days
WHERE day = (now() AT TIME ZONE 'UTC')::date ORDER BY provider;

-- content_spend_ensure: the content's row exists
INSERT INTO content_spend (content_id) VALUES (%(content_id)s) ON CONFLICT DO NOTHING;

-- content_spend_book: book one call's cost against the content, only within its limit
UPDATE content_spend SET spent = spent + %(cost)s, calls = calls + 1
WHERE content_id = %(content_id)s AND (%(limit)s::numeric IS NULL OR spent + %(cost)s <= %(limit)s::numeric)
RETURNING spent;

-- content_spend_refund: give back a content's booking whose call provably cost nothing
UPDATE content_spend SET spent = greatest(spent - %(cost)s, 0), calls = greatest(calls - 1, 0)
WHERE content_id = %(content_id)s;

-- content_spend_settle: a content's booked call becomes the figure the provider reported
UPDATE content_spend SET spent = greatest(spent + %(delta)s, 0) WHERE content_id = %(content_id)s;

-- refused_inputs_add: the provider refused this input's prompt; it is not sent again unchanged unless a person asks
INSERT INTO refused_inputs (fingerprint, task_id, message) VALUES (%(fingerprint)s, %(task_id)s, %(message)s)
ON CONFLICT (fingerprint) DO NOTHING;   -- the first refusal keeps its own words

-- refused_inputs_forget: a person asks for this task's input to be sent again although it was refused
DELETE FROM refused_inputs r USING tasks t WHERE t.id = %(task_id)s AND r.fingerprint = t.fingerprint
RETURNING r.task_id, r.message;
