"""The bulk lane's pause from the API and the pages: admins pause and resume it, everyone signed in sees
that it is paused, a bulk task's page says why it waits, and /metrics counts it."""

from __future__ import annotations

from testkit.pages import csrf_of, page, sign_in
from testkit.webapp import lesson


def test_only_an_admin_pauses_and_resumes_and_each_refusal_changes_nothing(api):
    assert api.get("/api/lanes/bulk", role="editor").json == {"lane": "bulk", "paused": False, "paused_at": None,
                                                              "paused_by": None, "waiting": 0}
    for role in ("editor", "reviewer", "delivery"):
        assert api.post("/api/lanes/bulk/pause", role=role).status_code == 403
    assert api.get("/api/lanes/bulk").json["paused"] is False
    refused = api.post("/api/lanes/bulk/resume")
    assert (refused.status_code, refused.json["error"]["code"]) == (409, "not_paused")

    paused = api.post("/api/lanes/bulk/pause")
    assert paused.status_code == 200 and paused.json["paused"] and paused.json["paused_by"] == "admin@example.com"
    again = api.post("/api/lanes/bulk/pause")
    assert (again.status_code, again.json["error"]["code"]) == (409, "already_paused")
    # bulk work is still accepted, and waits; the task's own page says so
    saved = api.post("/api/contents", json={**lesson(1), "priority": "bulk"}, role="editor")
    assert saved.status_code == 202
    image = next(t for t in api.get(saved.json["status_url"]).json["tasks"] if t["kind"] == "image")
    assert api.get(f"/api/tasks/{image['id']}").json["diagnosis"]["code"] == "lane_paused"
    assert "mediapipe_bulk_paused 1.0" in api.client.get("/metrics").get_data(as_text=True)

    resumed = api.post("/api/lanes/bulk/resume")
    assert resumed.status_code == 200 and resumed.json["paused"] is False and resumed.json["tasks_moved"] == 3
    assert api.get(f"/api/tasks/{image['id']}").json["diagnosis"]["code"] != "lane_paused"
    assert "mediapipe_bulk_paused 0.0" in api.client.get("/metrics").get_data(as_text=True)


def test_the_pages_show_the_pause_to_everyone_and_the_button_to_admins_in_both_languages(app, tokens):
    admin = app.test_client()
    sign_in(admin, tokens["admin"])
    html = page(admin, "/attention")
    assert 'data-bulk-lane="running"' in html and 'value="pause"' in html
    answer = admin.post("/attention/bulk-lane", data={"action": "pause", "csrf_token": csrf_of(html)})
    assert answer.status_code == 303
    html = page(admin, "/attention")
    assert 'data-bulk-lane="paused"' in html and 'value="resume"' in html and "data-bulk-paused" in html

    editor = app.test_client()
    editor.get("/signin", headers={"Accept-Language": "zh-CN"})
    sign_in(editor, tokens["editor"])
    contents = editor.get("/", headers={"Accept-Language": "zh-CN"}).get_data(as_text=True)
    assert "data-bulk-paused" in contents and "导入自" in contents and "admin@example.com" in contents
    attention = page(editor, "/attention")
    assert 'value="resume"' not in attention          # no button for a role that may not use it
    refused = editor.post("/attention/bulk-lane", data={"action": "resume", "csrf_token": csrf_of(attention)})
    assert refused.status_code == 403
    assert "data-bulk-paused" in page(editor, "/")    # still paused

    admin.post("/attention/bulk-lane", data={"action": "resume", "csrf_token": csrf_of(page(admin, "/attention"))})
    assert "data-bulk-paused" not in page(editor, "/")


def test_a_save_over_the_size_threshold_runs_in_the_bulk_lane_and_the_202_says_why(api):
    from testkit.helpers import lesson
    big = lesson(51)
    saved = api.post("/api/contents", json=big, role="editor")
    assert saved.status_code == 202
    assert saved.json["priority"] == "bulk" and "over BULK_SAVE_BLOCKS=50" in saved.json["priority_reason"]
    asked = api.post("/api/contents", json={**big, "priority": "interactive"}, role="admin")
    assert asked.json["priority"] == "interactive" and "priority_reason" not in asked.json
    small = api.post("/api/contents", json=lesson(3), role="editor")
    assert small.json["priority"] == "interactive" and "priority_reason" not in small.json
