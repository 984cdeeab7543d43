-- Provider limits shared by every worker: call slots and calls per minute.

-- provider_slots_ensure: make sure slots 1..max exist for a provider (idempotent)
INSERT INTO provider_slots (provider, slot)
SELECT %(provider)s, n FROM generate_series(1, %(max)s) n
ON CONFLICT DO NOTHING;

-- provider_slot_and_rate_take: hold a free slot among the first `max` and count one call in this
-- minute's window, both or neither (a holder that died frees its slot at held_until). The bulk lane asks with
-- `max` short of the interactive slots at the top; the interactive lane takes any, the top ones first, so it
-- leaves the bulk lane's slots to the bulk lane while it can
WITH free AS (
    SELECT provider, slot FROM provider_slots
    WHERE provider = %(provider)s AND slot <= %(max)s AND (holder IS NULL OR held_until < now())
    ORDER BY CASE WHEN %(top_first)s THEN -slot ELSE slot END LIMIT 1 FOR UPDATE SKIP LOCKED
), rate AS (
    INSERT INTO provider_rate (provider, minute, calls)
    SELECT %(provider)s, date_trunc('minute', now()), 1 FROM free
    ON CONFLICT (provider, minute) DO UPDATE SET calls = provider_rate.calls + 1
    WHERE provider_rate.calls < %(limit)s
    RETURNING calls
), taken AS (
    UPDATE provider_slots s SET holder = %(holder)s, held_until = now() + make_interval(secs => %(hold_seconds)s)
    FROM free WHERE s.provider = free.provider AND s.slot = free.slot AND EXISTS (SELECT 1 FROM rate)
    RETURNING s.slot
)
SELECT (SELECT slot FROM taken) AS slot, EXISTS (SELECT 1 FROM free) AS slot_free,
       60 - extract(second FROM now()) AS seconds_left;

-- provider_slots_release: give a slot back, only if we still hold it
UPDATE provider_slots SET holder = NULL, held_until = NULL
WHERE provider = %(provider)s AND slot = %(slot)s AND holder = %(holder)s;
