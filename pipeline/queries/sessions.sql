-- UI sessions, one row each; the cookie's token itself is never stored.

-- web_sessions_insert: a new UI session for a key; the cookie's token itself is never stored
INSERT INTO web_sessions (token_hash, key_id, data, expires_at)
VALUES (%(token_hash)s, %(key_id)s, %(data)s, now() + make_interval(secs => %(max_seconds)s));

-- web_sessions_touch: the live session with this token hash, its idle clock restarted; no row when it ended
-- (signed out, key revoked, idle too long or past its lifetime)
UPDATE web_sessions s SET seen_at = now()
FROM api_keys k
WHERE s.token_hash = %(token_hash)s AND k.id = s.key_id AND k.revoked_at IS NULL
  AND s.expires_at > now() AND s.seen_at > now() - make_interval(secs => %(idle_seconds)s)
RETURNING s.key_id, s.data, k.owner, k.role, k.team;

-- web_sessions_save: a session's data after the request changed it (CSRF token, flash messages)
UPDATE web_sessions SET data = %(data)s WHERE token_hash = %(token_hash)s;

-- web_sessions_delete: end one session (sign-out, or a new sign-in replacing it)
DELETE FROM web_sessions WHERE token_hash = %(token_hash)s;

-- web_sessions_delete_of_key: end every session of a key (the key was revoked)
DELETE FROM web_sessions WHERE key_id = %(key_id)s;

-- web_sessions_sweep: forget sessions that can no longer be used
DELETE FROM web_sessions
WHERE expires_at < now() OR seen_at < now() - make_interval(secs => %(idle_seconds)s);

-- signin_failures_add: count a failed sign-in from an address; a window older than `window` seconds starts again
INSERT INTO signin_failures AS f (address, failures, since) VALUES (%(address)s, 1, now())
ON CONFLICT (address) DO UPDATE
SET failures = CASE WHEN f.since < now() - make_interval(secs => %(window)s) THEN 1 ELSE f.failures + 1 END,
    since = CASE WHEN f.since < now() - make_interval(secs => %(window)s) THEN now() ELSE f.since END;

-- signin_failures_wait: seconds an address must wait before it may try again (no row: it may try now)
SELECT ceil(extract(epoch FROM since + make_interval(secs => %(window)s) - now()))::integer AS wait
FROM signin_failures
WHERE address = %(address)s AND failures >= %(limit)s AND since > now() - make_interval(secs => %(window)s);

-- signin_failures_sweep: forget windows that ended
DELETE FROM signin_failures WHERE since < now() - make_interval(secs => %(window)s);
