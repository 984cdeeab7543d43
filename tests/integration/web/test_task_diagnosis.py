"""A stuck task explained on its page and in GET /api/tasks/{id}: what it waits for, its lease, its heartbeat."""

from __future__ import annotations

from testkit.pages import page, sign_in


def tasks_by_kind(api, created) -> dict[str, dict]:
    return {t["kind"]: t for t in api.get(created["status_url"]).json["tasks"]}


def test_a_bundle_behind_its_media_names_the_task_it_waits_for(api, app, tokens):
    created = api.create(1)
    tasks = tasks_by_kind(api, created)
    doc = api.get(f"/api/tasks/{tasks['bundle']['id']}").json
    assert doc["diagnosis"]["code"] == "waiting_for_dependency"
    assert {d["id"] for d in doc["unmet_dependencies"]} == {tasks["image"]["id"], tasks["tts"]["id"]}
    assert doc["diagnosis"]["text"] == f"waiting for image task {tasks['image']['id']} (ready)"
    assert doc["lease"] is None
    client = app.test_client()
    sign_in(client, tokens["admin"])
    html = page(client, f"/tasks/{tasks['bundle']['id']}")
    assert f"waiting for Image task {tasks['image']['id']} (ready)" in html
    assert f'href="/tasks/{tasks["tts"]["id"]}"' in html


def test_a_task_whose_worker_died_says_when_recovery_takes_it_in_both_languages(api, app, tokens, conn):
    created = api.create(1)
    image = tasks_by_kind(api, created)["image"]
    # a worker on host-a claimed it, beat once 95 s ago, and died: its 30 s lease ran out 65 s ago
    conn.execute("UPDATE tasks SET status = 'running', attempts = 1, lease_token = gen_random_uuid(), "
                 "worker = 'host-a:4242', heartbeat_at = now() - interval '95 seconds', "
                 "lease_until = now() - interval '65 seconds' WHERE id = %s", (image["id"],))
    doc = api.get(f"/api/tasks/{image['id']}").json
    assert doc["diagnosis"]["code"] == "lease_expired"
    assert doc["diagnosis"]["text"].startswith("running, last heartbeat 95 s ago: its lease ran out at ")
    assert doc["lease"]["holder"] == "host-a:4242" and doc["lease"]["heartbeat_at"] is not None
    for language, words in (("en", "recovery takes it by"), ("zh-CN", "恢复程序将在")):
        client = app.test_client()
        client.get("/signin", headers={"Accept-Language": language})
        sign_in(client, tokens["admin"])
        html = client.get(f"/tasks/{image['id']}", headers={"Accept-Language": language}).get_data(as_text=True)
        assert words in html and "host-a:4242" in html, language
