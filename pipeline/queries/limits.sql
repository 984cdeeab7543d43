-- provider_slots_ensure: make sure slots 1..max exist for a provider (idempotent)
INSERT INTO provider_slots (provider, slot)
SELECT %(provider)s, n FROM generate_series(1, %(max)s) n
ON CONFLICT DO NOTHING;

-- provider_slots_take: hold a free slot among the first `max` (a holder that died frees its slot at held_until)
UPDATE provider_slots s SET holder = %(holder)s, held_until = now() + make_interval(secs => %(hold_seconds)s)
FROM (SELECT provider, slot FROM provider_slots
      WHERE provider = %(provider)s AND slot <= %(max)s AND (holder IS NULL OR held_until < now())
      ORDER BY slot LIMIT 1 FOR UPDATE SKIP LOCKED) free
WHERE s.provider = free.provider AND s.slot = free.slot
RETURNING s.slot;

-- provider_slots_release: give a slot back, only if we still hold it
UPDATE provider_slots SET holder = NULL, held_until = NULL
WHERE provider = %(provider)s AND slot = %(slot)s AND holder = %(holder)s;

-- provider_rate_take: count one call in this minute's window unless the window is full
INSERT INTO provider_rate (provider, minute, calls) VALUES (%(provider)s, date_trunc('minute', now()), 1)
ON CONFLICT (provider, minute) DO UPDATE SET calls = provider_rate.calls + 1
WHERE provider_rate.calls < %(limit)s
RETURNING calls, 60 - extract(second FROM now()) AS seconds_left;
