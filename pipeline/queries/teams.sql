-- Teams, and which team a content or a task belongs to (pipeline/teams.py).

-- teams_ensure: the team exists (made on first use, by `bin/keys create --team`, pipeline/keys.py); whether it was made now
WITH made AS (INSERT INTO teams (name) VALUES (%(team)s) ON CONFLICT (name) DO NOTHING RETURNING name)
SELECT EXISTS (SELECT 1 FROM made) AS made;

-- teams_list: every team, with how many live keys and contents it holds
SELECT t.name, t.created_at,
       (SELECT count(*) FROM api_keys k WHERE k.team = t.name AND k.revoked_at IS NULL) AS live_keys,
       (SELECT count(*) FROM contents c WHERE c.team = t.name) AS contents
FROM teams t ORDER BY t.name;

-- teams_of_content: the team a content belongs to (no row: no such content)
SELECT team FROM contents WHERE id = %(content_id)s;

-- teams_of_task: the team of the content a task belongs to (no row: no such task)
SELECT c.team FROM tasks t JOIN contents c ON c.id = t.content_id WHERE t.id = %(task_id)s;

-- teams_of_asset: whether a stored asset is the media of some task of a content the scope sees (NULL: any team)
SELECT EXISTS (SELECT 1 FROM tasks t JOIN contents c ON c.id = t.content_id
               WHERE t.asset_sha256 = %(sha256)s AND (%(team)s::text IS NULL OR c.team = %(team)s)) AS seen;
