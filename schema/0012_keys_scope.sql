-- Idempotency-Keys belong to the API key that sent them: another key sending the same Idempotency-Key (bin/import's
-- keys are predictable) makes a save of its own, and never reads or blocks the first key's.
ALTER TABLE versions DROP CONSTRAINT versions_save_key_key;
CREATE UNIQUE INDEX versions_save_key_per_key ON versions ((coalesce(saved_by_key, 0)), save_key)
    WHERE save_key IS NOT NULL;

-- The delivery role: reads delivery manifests and their signed media, nothing else.
ALTER TABLE api_keys DROP CONSTRAINT api_keys_role_check;
ALTER TABLE api_keys ADD CONSTRAINT api_keys_role_check CHECK (role IN ('editor', 'reviewer', 'admin', 'delivery'));

-- Failed UI sign-ins per client address, for throttling (pipeline/signins.py): a window and its count.
CREATE TABLE signin_failures (
    address  text PRIMARY KEY,
    failures integer NOT NULL CHECK (failures >= 1),
    since    timestamptz NOT NULL DEFAULT now()
);
