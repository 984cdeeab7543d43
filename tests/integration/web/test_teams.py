"""Teams: a key sees and acts on its own team's contents only; another team's content, version, task or medium
answers exactly as a missing one, on every route of the API and the pages, and nothing changes. Admins act across
teams, recorded with their team."""

from __future__ import annotations

import re

import pytest

from pipeline import keys
from testkit.pages import csrf_of, page, sign_in
from testkit.webapp import Api, make_app

TEAMS = ("alpha", "beta")
ROLES = ("editor", "reviewer", "delivery")
ARG = re.compile(r"<(?:\w+:)?(\w+)>")
NAMED = {"content_id", "task_id", "version", "sha256"}
MISSING = {"content_id": 987654, "task_id": 987654}


@pytest.fixture
def team_tokens(conn) -> dict[str, str]:
    """`<team>-<role>` for both teams, and an admin of a third team."""
    made = {f"{team}-{role}": keys.create(conn, f"{role}@{team}.example", role, team=team)[1]
            for team in TEAMS for role in ROLES}
    made["admin"] = keys.create(conn, "root@ops.example", "admin", team="ops")[1]
    return made


@pytest.fixture
def teams_api(app, team_tokens) -> Api:
    return Api(app.test_client(), team_tokens)


@pytest.fixture
def alpha(teams_api, work, conn) -> dict:
    """Alpha's content, made, approved and delivered: its ids, by the names the routes give them."""
    created = teams_api.create(1, role="alpha-editor")
    work.until_idle()
    assert teams_api.approve(created, role="alpha-reviewer").status_code == 200
    image = teams_api.tasks_of(created)["image:b1"]
    return {"content_id": created["content_id"], "version": created["version"], "task_id": image["id"],
            "sha256": image["sha256"], "created": created}


def state(conn) -> list:
    """Everything a request could change, as rows."""
    return [conn.execute(query).fetchall() for query in (
        "SELECT id, status, attempts, available_at, asset_sha256 FROM tasks ORDER BY id",
        "SELECT content_id, version, cancel_requested_at FROM versions ORDER BY 1, 2",
        "SELECT id, current_version, approved_version, title, team FROM contents ORDER BY id",
        "SELECT count(*) FROM events", "SELECT count(*) FROM outbox", "SELECT * FROM key_spend ORDER BY 1, 2")]


def routes(app) -> list[tuple[str, str, str]]:
    """(method, rule, endpoint) of every route that names a content, version, task or medium."""
    found = []
    for rule in app.url_map.iter_rules():
        if set(rule.arguments) & NAMED:
            found += [(method, rule.rule, rule.endpoint) for method in sorted(rule.methods - {"HEAD", "OPTIONS"})]
    return found


def url(rule: str, ids: dict) -> str:
    return ARG.sub(lambda m: str(ids[m.group(1)]), rule)


def role_for(app, endpoint: str, team: str) -> str:
    """A key of `team` whose role the API route asks for (so a 403 for the role never hides the answer)."""
    permission = getattr(app.view_functions[endpoint], "permission", "read")
    return f"{team}-" + next(role for role in ROLES if keys.PERMISSIONS[role] >= {permission})


def signed_in(app, token: str):
    client = app.test_client()
    return client, sign_in(client, token)


def ui_call(client, csrf: str, method: str, path: str):
    return client.get(path) if method == "GET" else client.open(path, method=method, data={"csrf_token": csrf})


def test_every_route_naming_a_content_version_task_or_medium_is_checked_here(app):
    """The matrix below covers the API document's paths and the pages' url map: every route that names one."""
    spec = Api(app.test_client(), {}).get("/api/openapi.json", role=None).json
    documented = {path for path in spec["paths"] if re.search(r"\{(content_id|task_id|version|sha256)\}", path)}
    served = {ARG.sub(r"{\1}", rule) for _, rule, _ in routes(app) if rule.startswith(("/api/", "/media/"))}
    assert documented and documented == served
    assert any(rule.startswith("/media/") for _, rule, _ in routes(app))
    assert len({endpoint for _, _, endpoint in routes(app)}) >= 30


def test_another_teams_content_answers_as_a_missing_one_on_every_route_and_nothing_changes(
        app, teams_api, team_tokens, alpha, conn):
    sessions = {role: signed_in(app, team_tokens[f"beta-{role}"]) for role in ("editor", "reviewer")}
    before = state(conn)
    checked = 0
    for method, rule, endpoint in routes(app):
        if rule.startswith("/media/"):
            continue   # below, with its own 404
        for caller in (("api",) if rule.startswith("/api/") else tuple(sessions)):
            answers = []
            for ids in (alpha, {**alpha, **MISSING}):
                path = url(rule, ids)
                if caller == "api":
                    response = teams_api.call(method, path, role=role_for(app, endpoint, "beta"), json={})
                    text = response.json["error"]["message"]
                else:
                    response = ui_call(*sessions[caller], method, path)
                    text = response.get_data(as_text=True)
                answers.append((response.status_code, re.sub(r"\d+", "N", text)))
            # another team's content and a missing one: the same status and words, but for the number
            assert answers[0] == answers[1] and answers[0][0] == 404, (method, rule, caller, answers)
        checked += 1
    assert checked >= 30
    for role in ROLES:
        response = teams_api.get(f"/media/{alpha['sha256']}", role=f"beta-{role}")
        assert response.status_code in ((404,) if role != "delivery" else (403,)), (role, response.status_code)
    assert state(conn) == before


def test_the_same_routes_answer_the_owning_team_as_before(app, teams_api, team_tokens, alpha, conn):
    client, csrf = signed_in(app, team_tokens["alpha-editor"])
    reviewer, reviewer_csrf = signed_in(app, team_tokens["alpha-reviewer"])
    for method, rule, endpoint in routes(app):
        path = url(rule, alpha)
        if rule.startswith("/api/"):
            status = teams_api.call(method, path, role=role_for(app, endpoint, "alpha"), json={}).status_code
        elif rule.startswith("/media/"):
            status = teams_api.get(path, role="alpha-editor").status_code
        else:
            status = max(ui_call(client, csrf, method, path).status_code,
                         ui_call(reviewer, reviewer_csrf, method, path).status_code
                         if method == "GET" else 0)
        assert status != 404, (method, rule, status)


def test_lists_search_attention_and_spend_show_a_teams_own_contents_only(teams_api, alpha, work, conn):
    mine = teams_api.create(1, role="beta-editor")
    work.until_idle()
    for team, expected in (("alpha", alpha["content_id"]), ("beta", mine["content_id"])):
        listed = teams_api.get("/api/contents", role=f"{team}-editor").json
        assert [item["id"] for item in listed["items"]] == [expected] and listed["total"] == 1
        found = teams_api.get("/api/contents?q=b1", role=f"{team}-editor").json
        assert [item["id"] for item in found["items"]] in ([expected], [])
    everything = teams_api.get("/api/contents", role="admin").json
    assert {item["id"] for item in everything["items"]} == {alpha["content_id"], mine["content_id"]}
    conn.execute("UPDATE tasks SET status = 'failed', attempts = max_attempts WHERE id = %s", (alpha["task_id"],))
    assert teams_api.get("/api/attention", role="beta-editor").json["total"] == 0
    assert [i["id"] for i in teams_api.get("/api/attention", role="alpha-editor").json["items"]] == [alpha["task_id"]]
    retried = teams_api.post("/api/attention/retry", role="beta-editor", json={"task_ids": [alpha["task_id"]]}).json
    assert retried["done"] == [] and retried["refused"][0]["code"] == "not_found"
    assert retried["refused"][0]["message"] == f"task {alpha['task_id']} does not exist"
    teams_api.create(1, role="alpha-editor")   # alpha's own reuse of its media, beside beta's reuse of them
    work.until_idle()
    calls = {who: sum(row["n"] for row in teams_api.get("/api/spend", role=role).json["ledger"])
             for who, role in (("alpha", "alpha-editor"), ("beta", "beta-editor"), ("admin", "admin"))}
    assert calls == {"alpha": 2, "beta": 2, "admin": 4}


def test_a_delivery_key_reads_its_own_teams_delivery_only(teams_api, alpha):
    mine = teams_api.get(f"/api/contents/{alpha['content_id']}/delivery", role="alpha-delivery")
    assert mine.status_code == 200 and mine.json["version"] == alpha["version"]
    theirs = teams_api.get(f"/api/contents/{alpha['content_id']}/delivery", role="beta-delivery")
    assert theirs.status_code == 404
    assert theirs.json["error"]["message"] == f"content {alpha['content_id']} does not exist"


def test_a_new_content_belongs_to_the_team_of_the_key_that_saved_it(teams_api, conn):
    created = teams_api.create(1, role="beta-editor")
    assert conn.execute("SELECT team FROM contents WHERE id = %s", (created["content_id"],)).fetchone()["team"] == "beta"
    by_admin = teams_api.create(1, role="admin")
    assert conn.execute("SELECT team FROM contents WHERE id = %s", (by_admin["content_id"],)).fetchone()["team"] == "ops"


def test_an_admin_acts_across_teams_and_the_content_records_the_admins_team(teams_api, alpha, conn):
    assert teams_api.get(f"/api/contents/{alpha['content_id']}", role="admin").status_code == 200
    withdrawn = teams_api.post(f"/api/contents/{alpha['content_id']}/versions/{alpha['version']}/withdraw",
                               role="admin", json={"note": "pulled for a correction"})
    assert withdrawn.status_code == 200, withdrawn.json
    crossed = conn.execute("SELECT actor, details FROM events WHERE content_id = %s AND action = 'cross_team'",
                           (alpha["content_id"],)).fetchall()
    assert [(row["actor"], row["details"]["actor_team"], row["details"]["content_team"]) for row in crossed] == [
        ("root@ops.example", "ops", "alpha")]
    assert "withdraw" in crossed[0]["details"]["request"]


def test_a_team_daily_cap_bounds_its_keys_together_and_no_other_team(database_url, redis_url, media_dir, conn):
    app = make_app(database_url, redis_url, media_dir, IMAGE_COST_PER_CALL="1", TTS_COST_PER_CALL="0",
                   KEY_DAILY_SPEND="3", TEAM_DAILY_SPEND="4")
    tokens = {name: keys.create(conn, f"{name}@example.com", "editor", team=name.rstrip("12"))[1]
              for name in ("alpha1", "alpha2", "beta1")}
    api = Api(app.test_client(), tokens)
    assert api.post("/api/contents", json=_lesson(3, "one"), role="alpha1").status_code == 202
    refused = api.post("/api/contents", json=_lesson(2, "two"), role="alpha2")   # 2 under the key's 3, 5 over 4
    assert refused.status_code == 429 and "team alpha" in refused.json["error"]["message"]
    assert "TEAM_DAILY_SPEND" in refused.json["error"]["message"] and refused.headers["Retry-After"]
    assert api.post("/api/contents", json=_lesson(1, "three"), role="alpha2").status_code == 202   # 4 of 4
    assert api.post("/api/contents", json=_lesson(3, "four"), role="beta1").status_code == 202
    booked = {r["team"]: float(r["estimated"]) for r in conn.execute("SELECT team, estimated FROM team_spend")}
    assert booked == {"alpha": 4.0, "beta": 3.0}


def _lesson(blocks: int, word: str) -> dict:
    return {"title": word, "locale": "en", "blocks": [{"key": f"b{i}", "text": f"{word} {i}",
                                                       "image_prompt": f"{word} {i}"} for i in range(blocks)]}


def test_a_team_name_is_checked_and_bin_keys_lists_the_team(conn):
    with pytest.raises(Exception, match="not a team name"):
        keys.create(conn, "x@example.com", "editor", team="Bad Team")
    info, _ = keys.create(conn, "y@example.com", "editor", team="gamma")
    assert [k.team for k in keys.list_keys(conn) if k.id == info.id] == ["gamma"]


def test_the_pages_list_only_the_teams_contents(app, teams_api, team_tokens, alpha):
    client, _ = signed_in(app, team_tokens["beta-editor"])
    html = page(client, "/")
    assert f"/contents/{alpha['content_id']}/" not in html
    client, _ = signed_in(app, team_tokens["alpha-editor"])
    assert f"/contents/{alpha['content_id']}/" in page(client, "/")
    assert csrf_of(page(client, "/"))
