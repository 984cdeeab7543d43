"""Review over the API: approve, deliver, retry failed and unknown work, resolve, cancel."""

from __future__ import annotations

from pipeline.core.errors import Ambiguous, Permanent
from pipeline import runtime
from testkit.helpers import lesson
from testkit.webapp import api_and_work


def test_approving_an_incomplete_version_is_409_listing_what_is_missing(api):
    created = api.create(1)
    response = api.approve(created)
    assert response.status_code == 409
    error = response.json["error"]
    assert error["code"] == "version_incomplete" and "image of b1 is ready" in error["message"]
    assert len(error["details"]["tasks"]) == 2


def test_approving_a_complete_version_is_200_and_recorded(api, work, conn):
    created = api.create(1)
    work.until_idle()
    response = api.approve(created)
    assert response.status_code == 200
    assert response.json["approved_by"] == "reviewer@example.com" and response.json["version"] == 1
    event = conn.execute("SELECT * FROM events WHERE action = 'approved'").fetchone()
    assert (event["actor"], event["version"], event["task_id"]) == ("reviewer@example.com", 1, None)
    assert api.get(f"/api/contents/{created['content_id']}").json["approved_version"] == 1


def test_approving_an_unknown_version_is_404(api):
    created = api.create(1)
    assert api.post(f"/api/contents/{created['content_id']}/versions/7/approve", role="reviewer").status_code == 404


def test_approving_a_version_older_than_the_approved_one_is_409(api, work):
    created = api.create(1)
    work.until_idle()
    second = api.put(created["content_url"], json={**lesson(1, prefix="二"), "base_version": 1}, role="editor").json
    work.until_idle()
    assert api.approve(second).status_code == 200
    response = api.approve(created)
    assert response.status_code == 409 and response.json["error"]["code"] == "older_than_approved"


def test_delivery_before_approval_is_409_with_reasons(api, work):
    created = api.create(1)
    response = api.delivery(created)
    assert response.status_code == 409
    details = response.json["error"]["details"]
    assert details["reasons"] == ["not_approved", "pending"] and len(details["pending"]) == 3
    work.until_idle()
    assert api.delivery(created).json["error"]["details"]["reasons"] == ["not_approved"]


def test_delivery_after_approval_is_the_manifest_with_signed_urls(api, work):
    created = api.create(2)
    work.until_idle()
    api.approve(created)
    response = api.delivery(created)
    assert response.status_code == 200
    body = response.json
    assert body["version"] == 1 and [b["key"] for b in body["blocks"]] == ["b1", "b2"]
    for block in body["blocks"]:
        for label in ("image", "audio"):
            assert block[label]["url"].startswith(f"/media/{block[label]['sha256']}?c={created['content_id']}&v=1"
                                                  "&expires=")
    assert body["bundle"]["url"].startswith(f"/media/{body['bundle']['sha256']}?c={created['content_id']}&v=1")
    assert "&signature=" in body["bundle"]["url"] and body["urls_expire_at"]
    # the consuming app needs no key for them
    assert api.client.get(body["bundle"]["url"]).status_code == 200


def test_the_approved_version_stays_delivered_while_a_newer_one_is_made(api, work):
    created = api.create(1)
    work.until_idle()
    api.approve(created)
    api.put(created["content_url"], json={**lesson(1, prefix="二"), "base_version": 1}, role="editor")
    response = api.delivery(created)
    assert response.status_code == 200 and response.json["version"] == 1


def test_delivery_lists_failed_and_unknown_tasks_of_the_approved_version(api, work, conn):
    created = api.create(1)
    work.until_idle()
    api.approve(created)
    # given the approved version's bundle is later found unusable (only a broken store could do this)
    bundle = api.tasks_of(created)["bundle:"]
    conn.execute("UPDATE tasks SET status = 'failed' WHERE id = %s", (bundle["id"],))
    details = api.delivery(created).json["error"]["details"]
    assert details["reasons"] == ["failed"] and details["failed"] == [bundle["id"]]


def test_delivery_of_unknown_content_is_404(api):
    assert api.get("/api/contents/42/delivery").status_code == 404


def test_retrying_a_failed_task_reopens_its_budget_and_runs_it_again(api, work, conn):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Permanent("refused")]
    work.until_idle()
    failed = api.tasks_of(created)["image:b1"]
    assert (failed["status"], failed["attempts"], failed["dead_letter"]) == ("failed", 1, "permanent error")
    # given the deadline already passed, a manual retry must still be able to run
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 second' WHERE id = %s", (image["id"],))
    response = api.post(f"/api/tasks/{image['id']}/retry", role="editor")
    assert response.status_code == 202
    assert response.headers["Location"] == f"/api/tasks/{image['id']}"
    assert (response.json["status"], response.json["attempts"], response.json["max_attempts"]) == ("ready", 1, 4)
    event = conn.execute("SELECT * FROM events WHERE action = 'manual_retry'").fetchone()
    assert (event["actor"], event["from_status"], event["to_status"]) == ("editor@example.com", "failed", "ready")
    assert event["details"]["dead_letter"]["reason"] == "permanent error"
    assert conn.execute("SELECT count(*) AS n FROM dead_letters").fetchone()["n"] == 0
    work.until_idle()
    done = api.tasks_of(created)
    assert (done["image:b1"]["status"], done["image:b1"]["attempts"]) == ("succeeded", 2)
    assert done["bundle:"]["status"] == "succeeded"


def test_retrying_an_unknown_task_without_accepting_the_risk_is_409_explaining_it(api, work, conn):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("read timeout after send")]
    work.until_idle()
    for body in (None, {}, {"accept_duplicate_risk": False}):
        response = api.post(f"/api/tasks/{image['id']}/retry", role="editor", json=body)
        assert response.status_code == 409
        assert response.json["error"]["code"] == "duplicate_risk"
        assert "charged" in response.json["error"]["message"]
    assert api.tasks_of(created)["image:b1"]["status"] == "unknown"


def test_retrying_an_unknown_task_accepting_the_risk_is_recorded_with_who(api, work, conn):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("read timeout after send")]
    work.until_idle()
    # the ledger as the provider executor writes it: the lost call may have been charged
    conn.execute("INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, cost) "
                 "VALUES (%s, 1, 'p', 'm', 'k', 'ambiguous', 0.04)", (image["id"],))
    response = api.post(f"/api/tasks/{image['id']}/retry", role="editor", json={"accept_duplicate_risk": True})
    assert response.status_code == 202 and response.json["duplicate_risk_accepted"] is True
    event = conn.execute("SELECT * FROM events WHERE action = 'duplicate_risk_accepted'").fetchone()
    assert (event["actor"], event["from_status"], event["to_status"], event["attempt"]) == (
        "editor@example.com", "unknown", "ready", 1)
    work.until_idle()
    conn.execute("INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, cost) "
                 "VALUES (%s, 2, 'p', 'm', 'k', 'succeeded', 0.04)", (image["id"],))
    spend = api.get(created["status_url"]).json["spend"]
    assert spend["paid_more_than_once"] == [{"task_id": image["id"], "kind": "image", "block": "b1",
                                             "charged_calls": 2, "cost": 0.08, "accepted_by": "editor@example.com"}]
    calls = api.get(f"/api/tasks/{image['id']}").json["calls"]
    assert [c["accepted_by"] for c in calls] == [None, "editor@example.com"]


def test_retrying_a_task_that_is_neither_failed_nor_unknown_is_409(api, work):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    assert api.post(f"/api/tasks/{image['id']}/retry", role="editor").status_code == 409
    work.until_idle()
    response = api.post(f"/api/tasks/{image['id']}/retry", role="editor")
    assert response.status_code == 409 and response.json["error"]["code"] == "invalid_transition"


def test_retrying_a_failed_task_of_an_old_version_is_409(api, work):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Permanent("refused")]
    work.until_idle()
    api.put(created["content_url"], json={**lesson(1, prefix="二"), "base_version": 1}, role="editor")
    response = api.post(f"/api/tasks/{image['id']}/retry", role="editor")
    assert response.status_code == 409 and response.json["error"]["code"] == "not_current"


def test_retry_of_an_unknown_task_id_is_404_whatever_its_body_and_a_non_boolean_flag_is_422(api):
    assert api.post("/api/tasks/999/retry", role="editor").status_code == 404
    # the task a route names is looked up before its body is read: a missing one is 404, as another team's is
    assert api.post("/api/tasks/999/retry", role="editor", json={"accept_duplicate_risk": "yes"}).status_code == 404
    task = api.tasks_of(api.create(1))["image:b1"]
    response = api.post(f"/api/tasks/{task['id']}/retry", role="editor", json={"accept_duplicate_risk": "yes"})
    assert response.status_code == 422 and response.json["error"]["field"] == "accept_duplicate_risk"


def test_resolving_an_unknown_task_as_failed_is_recorded_with_the_note(api, work, conn):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("connection lost after send")]
    work.until_idle()
    response = api.post(f"/api/tasks/{image['id']}/resolve", role="editor",
                        json={"outcome": "failed", "note": "vendor dashboard shows no such request"})
    assert response.status_code == 200 and response.json["status"] == "failed"
    event = conn.execute("SELECT * FROM events WHERE action = 'resolved_failed'").fetchone()
    assert (event["actor"], event["reason"]) == ("editor@example.com", "vendor dashboard shows no such request")
    assert conn.execute("SELECT reason FROM dead_letters").fetchone()["reason"] == "resolved as failed by an editor"
    # a failed task can then be retried without any duplicate-risk confirmation
    assert api.post(f"/api/tasks/{image['id']}/retry", role="editor").status_code == 202


def test_resolving_needs_outcome_failed_and_a_note(api, work):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    url = f"/api/tasks/{image['id']}/resolve"
    for body, field in (({"outcome": "succeeded", "note": "x"}, "outcome"), ({"outcome": "failed"}, "note"),
                        ({"outcome": "failed", "note": "n" * 2001}, "note")):
        response = api.post(url, role="editor", json=body)
        assert response.status_code == 422 and response.json["error"]["field"] == field
    assert api.post(url, role="editor").status_code == 400
    response = api.post(url, role="editor", json={"outcome": "failed", "note": "not unknown"})
    assert response.status_code == 409
    assert api.post("/api/tasks/999/resolve", role="editor", json={"outcome": "failed", "note": "x"}).status_code == 404


def test_cancelling_a_version_cancels_its_waiting_tasks(api, conn):
    created = api.create(1)
    response = api.post(created["status_url"] + "/cancel", role="editor")
    assert response.status_code == 202
    assert response.json["cancelled_now"] == 3 and response.headers["Location"] == created["status_url"]
    assert {t["status"] for t in api.tasks_of(created).values()} == {"cancelled"}
    assert conn.execute("SELECT cancel_requested_by FROM versions").fetchone()["cancel_requested_by"] == \
        "editor@example.com"


def test_cancelling_an_unknown_version_is_404(api):
    assert api.post("/api/contents/5/versions/1/cancel", role="editor").status_code == 404


def test_cancelling_a_finished_version_is_409_and_keeps_its_failed_tasks_retryable(api, work):
    created = api.create(1)
    tasks = api.tasks_of(created)
    work.executor.script[tasks["image:b1"]["id"]] = [Permanent("refused")]
    work.until_idle()
    assert api.get(created["status_url"]).json["status"] == "failed"
    response = api.post(created["status_url"] + "/cancel", role="editor")
    assert response.status_code == 409 and response.json["error"]["code"] == "nothing_to_cancel"
    assert api.get(created["status_url"]).json["cancel_requested_at"] is None
    assert api.post(f"/api/tasks/{tasks['image:b1']['id']}/retry", role="editor").status_code == 202


def test_a_version_says_its_status_from_accepted_to_complete(api, work):
    created = api.create(1)
    assert created["status"] == "in_progress"
    running = api.get(created["status_url"]).json
    assert running["status"] == "in_progress" and running["terminal"] is False
    assert {t["terminal"] for t in running["tasks"]} == {False}
    work.until_idle()
    done = api.get(created["status_url"]).json
    assert done["status"] == "complete" and done["terminal"] is True
    assert {t["terminal"] for t in done["tasks"]} == {True}
    assert api.get(f"/api/tasks/{done['tasks'][0]['id']}").json["terminal"] is True


def test_a_manual_retry_over_capacity_is_503_and_changes_nothing(database_url, redis_url, tmp_path, tokens, conn):
    # given: room for four pending tasks; a failed image whose bundle waits, and another lesson queued
    api, work = api_and_work(database_url, redis_url, tmp_path / "media", tokens, MAX_PENDING_TASKS="4")
    first = api.create(1)
    image = api.tasks_of(first)["image:b1"]["id"]
    work.executor.script[image] = [Permanent("refused")]
    work.until_idle()
    api.create(1)   # three more pending: four in all, the limit
    # when: an editor retries the failed image
    response = api.post(f"/api/tasks/{image}/retry", role="editor")
    # then: 503 with Retry-After, and the task is still failed with its dead letter
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    assert conn.execute("SELECT status FROM tasks WHERE id = %s", (image,)).fetchone()["status"] == "failed"
    assert conn.execute("SELECT count(*) AS n FROM dead_letters WHERE task_id = %s", (image,)).fetchone()["n"] == 1
    # and once the queue drains, the same retry is accepted
    work.until_idle()
    assert api.post(f"/api/tasks/{image}/retry", role="editor").status_code == 202
    runtime.install(None)
