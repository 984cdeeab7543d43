-- Read models: what the pages and the API show, each a join shaped for one view (pipeline/overview.py).

-- contents_overview: content items of a team, newest first, with the status counts of their current version and the
-- version their latest approval event left approved (pipeline/core/approvals.py: none after a withdrawal); with a search
-- pattern, those whose title or current text or image prompt holds it; with `before`, those older than that id
SELECT c.id, c.title, c.locale, c.theme, c.current_version, c.updated_at,
       (SELECT CASE WHEN e.action = 'approved' THEN e.version END FROM events e   -- index events_version_decisions
        WHERE e.content_id = c.id AND e.task_id IS NULL AND e.action IN ('approved', 'approval_withdrawn')
        ORDER BY e.id DESC LIMIT 1) AS approved_version,
       coalesce(s.counts, '{}'::jsonb) AS counts, coalesce(s.total, 0) AS total
FROM contents c
LEFT JOIN LATERAL (
    SELECT jsonb_object_agg(status, n) AS counts, sum(n)::int AS total
    FROM (SELECT status, count(*) AS n FROM tasks t
          WHERE t.content_id = c.id AND t.version = c.current_version GROUP BY status) per_status
) s ON true
WHERE (%(pattern)s::text IS NULL OR c.search_text ILIKE %(pattern)s)   -- the trigram index contents_search
  AND (%(before)s::bigint IS NULL OR c.id < %(before)s)               -- keyset: the page after the one ending there
  AND (%(team)s::text IS NULL OR c.team = %(team)s)                   -- a key's team (NULL: an admin's, every team)
ORDER BY c.id DESC LIMIT %(limit)s OFFSET %(offset)s;

-- contents_count: how many content items of a team match the search (all without one), for paging
SELECT count(*) AS n FROM contents c
WHERE (%(pattern)s::text IS NULL OR c.search_text ILIKE %(pattern)s) AND (%(team)s::text IS NULL OR c.team = %(team)s);

-- versions_of_content: a content item's versions, newest first (their approval comes from the events)
SELECT version, title, saved_by, saved_at, cancel_requested_at, cancel_requested_by
FROM versions WHERE content_id = %(content_id)s ORDER BY version DESC;

-- tasks_of_version_view: a version's tasks with their asset and whether their input already has an asset
SELECT t.id, t.kind, t.block_key, t.status, t.attempts, t.max_attempts,
       (SELECT count(*) FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NOT NULL) AS dispatches, t.available_at,
       t.deadline_at, t.lease_until, t.asset_sha256, t.last_error, t.last_error_code, t.waiting_for, t.fingerprint, t.updated_at,
       (i.sha256 IS NOT NULL) AS reusable, a.media_type, a.size AS asset_size, a.duration_ms, a.width, a.height,
       dl.reason AS dead_letter
FROM tasks t
LEFT JOIN asset_inputs i ON i.fingerprint = t.fingerprint
LEFT JOIN assets a ON a.sha256 = t.asset_sha256
LEFT JOIN dead_letters dl ON dl.task_id = t.id AND dl.replayed_at IS NULL
WHERE t.content_id = %(content_id)s AND t.version = %(version)s
ORDER BY t.id;

-- tasks_get_for_view: one task with its version's title and lane, its content's current and approved versions,
-- and the open pause of its lane, if any
SELECT t.*, v.title, v.locale, v.lane::text AS lane, c.current_version, c.approved_version, now() AS now,
       (SELECT count(*) FROM outbox o WHERE o.task_id = t.id AND o.sent_at IS NOT NULL) AS dispatches,
       p.paused_at AS lane_paused_at, p.paused_by AS lane_paused_by
FROM tasks t
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version
JOIN contents c ON c.id = t.content_id
LEFT JOIN lane_pauses p ON p.lane = v.lane AND p.resumed_at IS NULL
WHERE t.id = %(task_id)s;

-- tasks_of_version_with_cost: a version's media tasks with their input and what their calls cost (compare page)
SELECT t.id, t.kind::text AS kind, t.block_key, t.status::text AS status, t.fingerprint, t.asset_sha256, t.input,
       coalesce(sum(p.cost), 0)::float AS cost,
       count(p.id) FILTER (WHERE call_may_have_charged(p.outcome)) AS paid_calls,
       coalesce(bool_or(p.outcome = 'reused'), false) AS reused
FROM tasks t JOIN task_kinds k ON k.name = t.kind LEFT JOIN provider_calls p ON p.task_id = t.id
WHERE t.content_id = %(content_id)s AND t.version = %(version)s AND NOT k.completes_version
GROUP BY t.id ORDER BY t.id;

-- attention_tasks: tasks that need a person (the view tasks_needing_attention), of a team (NULL: all), filtered,
-- oldest change first
SELECT * FROM tasks_needing_attention
WHERE (%(problem)s::text IS NULL OR problem = %(problem)s) AND (%(kind)s::text IS NULL OR kind = %(kind)s)
  AND (%(content_id)s::bigint IS NULL OR content_id = %(content_id)s)
  AND (%(team)s::text IS NULL OR content_id IN (SELECT c.id FROM contents c WHERE c.team = %(team)s))
ORDER BY updated_at, id LIMIT %(limit)s OFFSET %(offset)s;

-- attention_counts: how many tasks need a person, per problem, under the same filters but the problem's
SELECT problem, count(*)::int AS n FROM tasks_needing_attention
WHERE (%(kind)s::text IS NULL OR kind = %(kind)s) AND (%(content_id)s::bigint IS NULL OR content_id = %(content_id)s)
  AND (%(team)s::text IS NULL OR content_id IN (SELECT c.id FROM contents c WHERE c.team = %(team)s))
GROUP BY problem;

-- tasks_unmet_of_task: a task's dependencies that have not succeeded, for its diagnosis
SELECT x.id, x.kind::text AS kind, x.status::text AS status FROM task_deps d JOIN tasks x ON x.id = d.depends_on
WHERE d.task_id = %(task_id)s AND x.status <> 'succeeded'
ORDER BY x.id;
