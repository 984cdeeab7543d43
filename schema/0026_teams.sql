-- Teams: every API key and every content belongs to one. A key sees and acts on its own team's contents only
-- (pipeline/teams.py); admins act across teams. Existing keys and contents move to the team "default". The columns
-- keep that default so that a release from before teams, still running during a rolling deploy, saves into it; this
-- release always names the team.
CREATE TABLE teams (
    name       text PRIMARY KEY CHECK (name ~ '^[a-z0-9][a-z0-9_-]{0,39}$'),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO teams (name) VALUES ('default');

ALTER TABLE api_keys ADD COLUMN team text NOT NULL DEFAULT 'default' REFERENCES teams (name);
ALTER TABLE contents ADD COLUMN team text NOT NULL DEFAULT 'default' REFERENCES teams (name);
CREATE INDEX contents_team ON contents (team, id);

-- What each team's actions booked per UTC day, beside each key's (key_spend): TEAM_DAILY_SPEND bounds a team
-- whatever number of keys it holds.
CREATE TABLE team_spend (
    team      text NOT NULL REFERENCES teams (name),
    day       date NOT NULL,
    estimated numeric NOT NULL DEFAULT 0 CHECK (estimated >= 0),
    PRIMARY KEY (team, day)
);

-- book_spend: book_key_spend (0013), and the same cost against the team of each content the tasks belong to (an
-- admin's bulk retry may span teams); raises MPK03 when the key's booking would pass `key_limit`, MPK04 when a
-- team's would pass `team_limit`, so the whole action rolls back. Returns what was booked. Teams are booked in
-- name order, so two actions never wait on each other's rows crosswise.
CREATE FUNCTION book_spend(for_key bigint, of_content bigint, of_version integer, only_tasks bigint[],
                           image_cost numeric, tts_cost numeric, key_limit numeric, team_limit numeric)
RETURNS numeric LANGUAGE plpgsql AS $$
DECLARE
    total  numeric;
    booked numeric;
    per    record;
BEGIN
    total := book_key_spend(for_key, of_content, of_version, only_tasks, image_cost, tts_cost, key_limit);
    IF total = 0 THEN
        RETURN 0;
    END IF;
    FOR per IN
        SELECT c.team, sum(CASE t.kind WHEN 'image' THEN image_cost WHEN 'tts' THEN tts_cost ELSE 0 END) AS cost
        FROM tasks t JOIN contents c ON c.id = t.content_id
        WHERE CASE WHEN only_tasks IS NULL THEN t.content_id = of_content AND t.version = of_version
                   ELSE t.id = ANY (only_tasks) END
          AND t.kind <> 'bundle'
          AND NOT EXISTS (SELECT 1 FROM asset_inputs a WHERE a.fingerprint = t.fingerprint)
        GROUP BY c.team ORDER BY c.team
    LOOP
        INSERT INTO team_spend AS s (team, day, estimated)
        VALUES (per.team, (now() AT TIME ZONE 'UTC')::date, per.cost)
        ON CONFLICT ON CONSTRAINT team_spend_pkey DO UPDATE SET estimated = s.estimated + excluded.estimated
        RETURNING s.estimated INTO booked;
        IF team_limit IS NOT NULL AND booked > team_limit THEN
            RAISE EXCEPTION 'this team''s daily spend would pass its limit' USING ERRCODE = 'MPK04',
                DETAIL = json_build_object('team', per.team, 'booked', booked - per.cost, 'adding', per.cost,
                                           'limit', team_limit)::text;
        END IF;
    END LOOP;
    RETURN total;
END
$$;

-- A signed-in reader is served a stored asset only when a task of a content its team sees made it (web/media.py).
CREATE INDEX tasks_by_asset ON tasks (asset_sha256) WHERE asset_sha256 IS NOT NULL;
