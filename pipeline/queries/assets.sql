-- assets_upsert: index a stored file by its sha256 (the bytes are already on disk)
INSERT INTO assets (sha256, media_type, size, width, height, duration_ms)
VALUES (%(sha256)s, %(media_type)s, %(size)s, %(width)s, %(height)s, %(duration_ms)s)
ON CONFLICT (sha256) DO NOTHING;

-- asset_inputs_upsert: remember which input produced the asset (first producer wins)
INSERT INTO asset_inputs (fingerprint, sha256) VALUES (%(fingerprint)s, %(sha256)s)
ON CONFLICT (fingerprint) DO NOTHING;

-- asset_inputs_find: the stored asset an input fingerprint already produced, if any
SELECT a.* FROM asset_inputs i JOIN assets a ON a.sha256 = i.sha256 WHERE i.fingerprint = %(fingerprint)s;

-- assets_get: one asset's index row
SELECT * FROM assets WHERE sha256 = %(sha256)s;

-- provider_calls_insert: one row of the call ledger
INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, http_status,
                            latency_ms, cost, accepted_by)
VALUES (%(task_id)s, %(attempt)s, %(provider)s, %(model)s, %(idempotency_key)s, %(outcome)s, %(http_status)s,
        %(latency_ms)s, %(cost)s, %(accepted_by)s);

-- provider_calls_of_task: a task's calls, oldest first
SELECT * FROM provider_calls WHERE task_id = %(task_id)s ORDER BY id;

-- provider_calls_key_charged: an earlier call with this idempotency key may have been charged
SELECT EXISTS (SELECT 1 FROM provider_calls WHERE idempotency_key = %(idempotency_key)s
               AND outcome = 'ambiguous' AND cost > 0) AS charged;
