-- Provider limits shared by every worker: call slots and calls per minute.

-- provider_slots_ensure: make sure slots 1..max exist for a provider (idempotent)
INSERT INTO provider_slots (provider, slot)
SELECT %(provider)s, n FROM generate_series(1, %(max)s) n
ON CONFLICT DO NOTHING;

-- provider_slot_and_rate_take: hold a free slot among the first `max` and count one call in this
-- minute's window, both or neither (a holder that died frees its slot at held_until). The bulk lane asks with
-- `max` short of the interactive slots at the top, and takes none while interactive work of its kind waits for a
-- slot (that work is woken first); the interactive lane takes any, the top ones first, so it leaves the bulk
-- lane's slots to the bulk lane while it can. The holder is the attempt's lease token
WITH free AS (
    SELECT provider, slot FROM provider_slots
    WHERE provider = %(provider)s AND slot <= %(max)s AND (holder IS NULL OR held_until < now())
      AND (%(top_first)s OR NOT EXISTS (
            SELECT 1 FROM tasks w JOIN versions v ON v.content_id = w.content_id AND v.version = w.version
            WHERE w.kind = %(kind)s AND w.status = 'retry' AND w.waiting_for = 'slot' AND v.lane = 'interactive'))
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

-- provider_slots_release: give a slot back, only if we still hold it (then provider_slots_wake)
UPDATE provider_slots SET holder = NULL, held_until = NULL
WHERE provider = %(provider)s AND slot = %(slot)s AND holder = %(holder)s;

-- provider_slots_release_of_attempt: the slot an attempt whose lease ran out still holds (its worker died
-- mid-call), given back with the decision about that attempt
UPDATE provider_slots SET holder = NULL, held_until = NULL WHERE holder = %(lease_token)s
RETURNING provider, slot;

-- provider_slots_wake: wake the kind's slot waiters that the provider's free slots allow (their outbox rows):
-- after a release, and from the recovery scan for slots that ran out or freed just before their waiters parked
SELECT woken AS outbox_id FROM wake_slot_waiters(%(kind)s, %(provider)s, %(bulk_slots)s) AS woken;
