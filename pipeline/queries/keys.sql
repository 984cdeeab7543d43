-- API keys: only a token's sha256 is stored.

-- api_keys_insert: a new key; only its sha256 is stored, the token itself is shown once
INSERT INTO api_keys (owner, role, key_hash, team)
VALUES (%(owner)s, %(role)s, %(key_hash)s, %(team)s)
RETURNING id, owner, role, team, created_at, revoked_at;

-- api_keys_by_hash: the live key with this hash (a revoked key authenticates nobody)
SELECT id, owner, role, team FROM api_keys WHERE key_hash = %(key_hash)s AND revoked_at IS NULL;

-- api_keys_get_live: a live key by id (sessions re-check it on every request, so revoking signs out)
SELECT id, owner, role, team FROM api_keys WHERE id = %(key_id)s AND revoked_at IS NULL;

-- api_keys_list: every key, newest first, without hashes
SELECT id, owner, role, team, created_at, revoked_at FROM api_keys ORDER BY id DESC;

-- api_keys_revoke: revoke a live key; zero rows when it is unknown or already revoked
UPDATE api_keys SET revoked_at = now() WHERE id = %(key_id)s AND revoked_at IS NULL
RETURNING id, owner, role, team, created_at, revoked_at;

-- api_keys_live_admins: how many admin keys can still sign in
SELECT count(*) AS n FROM api_keys WHERE role = 'admin' AND revoked_at IS NULL;

-- api_keys_lock: serialise first-start key creation between processes started together
SELECT pg_advisory_xact_lock(7411004);

-- api_keys_hash_known: whether a token was ever registered, revoked or not (a revoked LAB_API_KEY stays revoked)
SELECT EXISTS (SELECT 1 FROM api_keys WHERE key_hash = %(key_hash)s) AS known;

-- key_spend_book: book the estimated cost of the paid calls an action of this key may cause (its tasks whose input
-- has no stored asset) against the key's and each content's team's daily limits (book_spend, schema/functions/book_spend.sql; `costs`: a call's estimate by kind);
-- MPK03 when the key's is passed, MPK04 when a team's is
SELECT book_spend(%(key_id)s::bigint, %(content_id)s::bigint, %(version)s::integer, %(task_ids)s::bigint[],
                  %(costs)s::jsonb, %(limit)s::numeric, %(team_limit)s::numeric)
       AS booked;

