-- Contents search by a trigram index instead of a scan of every current version's blocks: each content keeps the
-- text it is found by (its title and its current version's texts and image prompts), written by the save that
-- makes the version current, and a GIN trigram index serves ILIKE '%...%' on it. pg_trgm is a trusted extension:
-- the database's owner may create it.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

-- search_text_of: the searchable text of a title and a version's blocks
CREATE FUNCTION search_text_of(title text, blocks jsonb) RETURNS text LANGUAGE sql IMMUTABLE AS $$
    SELECT title || coalesce((SELECT string_agg(coalesce(b->>'text', '') || ' ' || coalesce(b->>'image_prompt', ''),
                                                ' ' ORDER BY ordinality)
                              FROM jsonb_array_elements(blocks) WITH ORDINALITY AS e(b, ordinality)), '')
$$;

ALTER TABLE contents ADD COLUMN search_text text NOT NULL DEFAULT '';
UPDATE contents c SET search_text = search_text_of(c.title, v.blocks)
FROM versions v WHERE v.content_id = c.id AND v.version = c.current_version;
CREATE INDEX contents_search ON contents USING gin (search_text gin_trgm_ops);
