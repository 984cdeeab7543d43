-- Provider limits shared by every worker: call slots and calls per minute.

-- provider_slots_ensure: make sure slots 1..max exist for a provider (idempotent; schema: provider_slots_ensure)
SELECT provider_slots_ensure(%(provider)s, %(max)s);

-- provider_slot_and_rate_take: hold a free slot among the first `max` and count one call in this minute's window,
-- both or neither, for the attempt whose lease token is `holder` (schema: provider_slot_and_rate_take, which says
-- how the lanes share the slots)
SELECT * FROM provider_slot_and_rate_take(%(provider)s, %(max)s, %(top_first)s, %(kind)s::text, %(holder)s,
                                          %(limit)s, %(hold_seconds)s);

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
