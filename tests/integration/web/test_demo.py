"""Demo jobs: built-in lessons and armed fault scenarios, driven through POST /api/jobs."""

from __future__ import annotations

import pytest

from pipeline import demo, runtime
from pipeline.executor import build_providers
from testkit.helpers import wait_until
from testkit.webapp import Api, Work, make_app


def armed(app) -> list[str]:
    return build_providers(app.config["SETTINGS"])["image"].armed_faults()


def test_a_demo_job_saves_the_themes_lesson_and_answers_202(api, conn):
    response = api.post("/api/jobs", json={"theme": "校园生活"}, role="editor")
    assert response.status_code == 202
    assert response.headers["Location"] == f"/api/contents/{response.json['content_id']}/versions/1"
    row = conn.execute("SELECT title, locale, blocks FROM versions").fetchone()
    assert (row["title"], row["locale"]) == ("校园生活", "zh-CN") and len(row["blocks"]) == 4


@pytest.mark.parametrize("theme, title, locale", [("campus life", "Campus life", "en-US"), ("家庭", "家庭", "zh-CN"),
                                                  ("Travel", "Travel", "en-US")])
def test_every_template_exists_in_chinese_and_english(theme, title, locale):
    draft = demo.lesson(theme)
    assert (draft.title, draft.locale) == (title, locale)
    other = demo.lesson(theme, locale="zh-CN" if locale == "en-US" else "en-US")
    assert other.locale != locale and len(other.blocks) == len(draft.blocks)


@pytest.mark.parametrize("scenario, fault", list(demo.SCENARIOS.items()))
def test_each_scenario_arms_its_fault_in_the_local_image_provider(app, api, scenario, fault):
    response = api.post("/api/jobs", json={"theme": "旅行", "scenario": scenario}, role="editor")
    assert response.status_code == 202 and response.json["scenario"] == scenario
    assert armed(app) == [fault]


def test_a_job_with_a_scenario_makes_new_images_so_the_fault_strikes_it(api, conn):
    api.post("/api/jobs", json={"theme": "旅行"}, role="editor")
    api.post("/api/jobs", json={"theme": "旅行", "scenario": "media_timeout"}, role="editor")
    plain, marked = [r["fingerprint"] for r in conn.execute(
        "SELECT fingerprint FROM tasks WHERE kind = 'image' AND block_key = 's1' ORDER BY id")]
    assert plain != marked
    reused = conn.execute("SELECT count(DISTINCT fingerprint) AS n FROM tasks WHERE kind = 'tts'").fetchone()["n"]
    assert reused == 4  # narration stays the same input, so it is reused


@pytest.mark.parametrize("body, status, field", [
    ({"theme": "cooking"}, 422, "theme"), ({}, 422, "theme"), ({"theme": "旅行", "scenario": "meteor"}, 422, "scenario"),
    ({"theme": "旅行", "locale": "fr-FR"}, 422, "locale"), (["旅行"], 422, "body"), (None, 400, None),
    # what a fuzzer found: a list where a name belongs was a 500, an explicit null locale was accepted
    ({"theme": "旅行", "scenario": [{}]}, 422, "scenario"), ({"theme": "旅行", "locale": None}, 422, "locale"),
    ({"theme": "旅行", "colour": "red"}, 422, "colour"),
])
def test_a_bad_job_request_is_refused_and_arms_nothing(app, api, conn, body, status, field):
    response = api.post("/api/jobs", json=body, role="editor") if body is not None else api.post("/api/jobs",
                                                                                                role="editor")
    assert response.status_code == status
    assert response.json["error"].get("field") == field
    assert armed(app) == [] and conn.execute("SELECT count(*) AS n FROM contents").fetchone()["n"] == 0


def test_a_refused_save_leaves_no_fault_armed(database_url, redis_url, media_dir, tokens):
    app = make_app(database_url, redis_url, media_dir, MAX_PENDING_TASKS="12")
    api = Api(app.test_client(), tokens)
    assert api.post("/api/jobs", json={"theme": "旅行"}, role="editor").status_code == 202   # 9 tasks pending
    response = api.post("/api/jobs", json={"theme": "旅行", "scenario": "rate_limited"}, role="editor")
    assert response.status_code == 503 and armed(app) == []


def test_demo_jobs_are_404_outside_demo_mode(database_url, redis_url, media_dir, tokens):
    app = make_app(database_url, redis_url, media_dir, DEMO_MODE="false")
    response = Api(app.test_client(), tokens).post("/api/jobs", json={"theme": "旅行"}, role="editor")
    assert response.status_code == 404


@pytest.fixture
def real_work(app):
    """The local image and speech providers, run in this process."""
    cfg = app.config["SETTINGS"]
    rt = runtime.with_providers(cfg, worker_id="demo-worker")
    yield Work(cfg, None, rt)
    runtime.install(None)


def complete(api, real_work, status_url: str) -> dict[tuple, dict]:
    def finished():
        real_work.until_idle(rounds=1)
        return api.get(status_url).json["progress"]["percent"] == 100
    wait_until(finished, timeout=60, interval=0.2, message="the lesson completes")
    return {(t["kind"], t["block"]): t for t in api.get(status_url).json["tasks"]}


def test_the_seed_job_then_an_edit_shows_the_retry_the_reuse_and_the_new_delivery(api, real_work):
    # given the seed call of the dev stack: 校园生活 with the first image call failing before the provider
    created = api.post("/api/jobs", json={"theme": "校园生活", "scenario": "media_timeout"}, role="editor").json
    tasks = complete(api, real_work, created["status_url"])
    first = tasks[("image", "s1")]
    assert first["attempts"] == 2
    assert [e["to_status"] for e in first["events"]] == ["running", "retry", "running", "succeeded"]
    assert all(t["attempts"] == 1 for key, t in tasks.items() if key != ("image", "s1"))
    assert api.get(first["asset_url"]).mimetype == "image/webp"
    assert api.get(tasks[("tts", "s1")]["asset_url"]).mimetype == "audio/wav"
    assert api.approve(created, role="reviewer").status_code == 200
    # when an editor changes one block and saves on top of version 1
    content = api.get(created["content_url"]).json
    blocks = [dict(b) for b in content["blocks"]]
    blocks[1] = {**blocks[1], "text": "第一节课是数学课。", "image_prompt": None}
    second = api.put(created["content_url"], role="editor", json={
        "title": content["title"], "locale": content["locale"], "theme": content["theme"], "blocks": blocks,
        "base_version": 1}).json
    tasks = complete(api, real_work, second["status_url"])
    # then the unchanged blocks reuse their media and only the edited block is made again
    reused = {key for key, t in tasks.items() if any(e["action"] == "reused" for e in t["events"])}
    assert reused == {(kind, f"s{i}") for kind in ("image", "tts") for i in (1, 3, 4)}
    assert api.get(f"/api/contents/{created['content_id']}/delivery").json["version"] == 1
    assert api.approve(second, role="reviewer").status_code == 200
    assert api.get(f"/api/contents/{created['content_id']}/delivery").json["version"] == 2


def test_the_readme_seed_call_without_a_key_works_only_in_demo_mode_from_loopback(app, database_url, redis_url,
                                                                                  media_dir, tokens):
    client = app.test_client()
    body = {"theme": "校园生活", "scenario": "media_timeout"}
    # the README's call with LAB_API_KEY unset sends an empty key
    response = client.post("/api/jobs", json=body, headers={"X-API-Key": ""})
    assert response.status_code == 202
    forwarded = client.post("/api/jobs", json=body, headers={"X-API-Key": "", "X-Forwarded-For": "203.0.113.9"})
    assert forwarded.status_code == 401
    remote = client.post("/api/jobs", json=body, headers={"X-API-Key": ""},
                         environ_base={"REMOTE_ADDR": "203.0.113.9"})
    assert remote.status_code == 401
    assert client.post("/api/contents", json={"title": "t"}, headers={"X-API-Key": ""}).status_code == 401
    off = make_app(database_url, redis_url, media_dir, DEMO_MODE="false").test_client()
    assert off.post("/api/jobs", json=body, headers={"X-API-Key": ""}).status_code == 401


def test_a_demo_fault_strikes_only_its_own_lessons_tasks(app, api, real_work, conn):
    from pipeline import message

    # given: a demo job whose first image is to be refused for good, and an editor's lesson saved after it
    job = api.post("/api/jobs", json={"theme": "旅行", "scenario": "permanent_error"}, role="editor").json
    other = api.create(1)
    other_image = next(t for t in api.get(other["status_url"]).json["tasks"] if t["kind"] == "image")
    # when: the editor's image is made first
    runtime.install(real_work.rt)
    assert message.run_task(other_image["id"]) == "succeeded"
    # then: the fault waits for its own lesson
    assert armed(app) == ["permanent_error"]

    def settled():
        real_work.until_idle(rounds=1)
        return api.get(job["status_url"]).json["status"] != "in_progress"
    wait_until(settled, timeout=60, interval=0.2, message="the demo lesson settles")
    tasks = {(t["kind"], t["block"]): t for t in api.get(job["status_url"]).json["tasks"]}
    failed = [key for key, t in tasks.items() if t["status"] == "failed"]
    assert len(failed) == 1 and failed[0][0] == "image" and armed(app) == []
    assert tasks[failed[0]]["last_error_code"] == "permanent_error"
    assert {t["status"] for t in api.get(other["status_url"]).json["tasks"]} == {"succeeded"}


def test_the_provider_unknown_demo_stays_unknown_through_reconciles_until_an_editor_decides(app, api, real_work,
                                                                                             conn):
    from pipeline.reconcile import Reconciler

    # given: the demo whose first image is made but its answer lost, and the provider's lookup cannot tell
    job = api.post("/api/jobs", json={"theme": "旅行", "scenario": "provider_unknown"}, role="editor").json

    def media():
        return [t for t in api.get(job["status_url"]).json["tasks"] if t["kind"] != "bundle"]

    def settled():
        real_work.until_idle(rounds=1)
        return {t["status"] for t in media()} <= {"succeeded", "unknown"}
    wait_until(settled, timeout=60, interval=0.2, message="the demo's media settle")
    [unknown] = [t for t in media() if t["status"] == "unknown"]
    # when: the reconciler runs, as bin/dev's does every 10 s
    cfg = app.config["SETTINGS"]
    for _ in range(2):
        Reconciler(cfg, conn, build_providers(cfg)).run()
    # then: nothing decides for the editor; the consent step is where the task waits
    task = api.get(f"/api/tasks/{unknown['id']}").json
    assert (task["status"], task["attempts"]) == ("unknown", 1)
    assert api.post(f"/api/tasks/{unknown['id']}/retry", role="editor").json["error"]["code"] == "duplicate_risk"
    retried = api.post(f"/api/tasks/{unknown['id']}/retry", role="editor", json={"accept_duplicate_risk": True})
    assert retried.status_code == 202
    tasks = complete(api, real_work, job["status_url"])
    assert {t["status"] for t in tasks.values()} == {"succeeded"}
