-- The assets index (the bytes are in the media store) and which input produced each asset.

-- assets_upsert: index a stored file by its sha256 (the bytes are already on disk)
INSERT INTO assets (sha256, media_type, size, width, height, duration_ms)
VALUES (%(sha256)s, %(media_type)s, %(size)s, %(width)s, %(height)s, %(duration_ms)s)
ON CONFLICT (sha256) DO NOTHING;

-- assets_get: one asset's index row
SELECT * FROM assets WHERE sha256 = %(sha256)s;

-- asset_inputs_upsert: remember which input produced the asset (first producer wins)
INSERT INTO asset_inputs (fingerprint, sha256) VALUES (%(fingerprint)s, %(sha256)s)
ON CONFLICT (fingerprint) DO NOTHING;

-- asset_inputs_find: the stored asset an input fingerprint already produced, if any
SELECT a.* FROM asset_inputs i JOIN assets a ON a.sha256 = i.sha256 WHERE i.fingerprint = %(fingerprint)s;

-- assets_stale: assets past retention that no current or approved version uses, and that no regeneration replaced
-- (an editor's rejected picture stays reachable from its version; index events_replaced_assets)
SELECT a.sha256 FROM assets a
WHERE a.created_at < now() - make_interval(days => %(days)s)
  AND NOT EXISTS (SELECT 1 FROM tasks t JOIN contents c ON c.id = t.content_id
                  WHERE t.asset_sha256 = a.sha256
                    AND (t.version = c.current_version OR t.version = c.approved_version))
  AND NOT EXISTS (SELECT 1 FROM events e WHERE e.action = 'regenerated' AND e.details->>'replaced_sha256' = a.sha256)
LIMIT %(limit)s;

-- assets_delete: drop an asset from the index (its file is deleted after commit)
WITH inputs AS (DELETE FROM asset_inputs WHERE sha256 = %(sha256)s)
DELETE FROM assets WHERE sha256 = %(sha256)s RETURNING sha256;
