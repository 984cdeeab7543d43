"""The review workflow over the API: compare versions, regenerate knowingly, reject and ask for changes,
withdraw an approval, the attention list and its bulk actions, search and readable download names."""

from __future__ import annotations

from urllib.parse import unquote

from pipeline import runtime
from pipeline.core.errors import Ambiguous, Permanent
from testkit.helpers import lesson
from testkit.webapp import Api, api_and_work, make_app


def edit(api, created, base: int, blocks: list[dict], **extra):
    body = {**lesson(1), "blocks": blocks, "base_version": base, **extra}
    response = api.put(created["content_url"], json=body, role="editor")
    assert response.status_code == 202, response.json
    return response.json


# --- compare ---------------------------------------------------------------------------------

def test_comparing_two_versions_lists_blocks_added_removed_changed_and_media_reused_new_or_superseded(api, work):
    # given: version 1 with three blocks, made; version 2 keeps b1, changes b2, drops b3 and adds b4
    created = api.create(3)
    work.until_idle()
    old = api.get(created["status_url"]).json["tasks"]
    blocks = [{"key": "b1", "text": "第1段：我们在学校学习。"}, {"key": "b2", "text": "第2段：我们在公园学习。"},
              {"key": "b4", "text": "新的一段。"}]
    second = edit(api, created, 1, blocks)
    work.until_idle()
    # when
    response = api.get(f"/api/contents/{created['content_id']}/compare?from=1&to=2")
    # then
    assert response.status_code == 200
    doc = response.json
    assert {b["key"]: b["change"] for b in doc["blocks"]} == {"b1": "unchanged", "b2": "changed", "b4": "added",
                                                              "b3": "removed"}
    b2 = next(b for b in doc["blocks"] if b["key"] == "b2")
    assert {"op": "delete", "text": "学校"} in b2["text_diff"] and {"op": "insert", "text": "公园"} in b2["text_diff"]
    media = {(m["block"], m["kind"]): m for m in doc["media"]}
    assert media[("b1", "image")]["change"] == "reused" and media[("b1", "tts")]["change"] == "reused"
    assert media[("b1", "image")]["to"]["sha256"] == media[("b1", "image")]["from"]["sha256"]
    assert media[("b2", "image")]["change"] == "new" and media[("b4", "tts")]["change"] == "new"
    assert media[("b3", "image")]["change"] == "superseded" and media[("b3", "image")]["to"] is None
    assert media[("b3", "image")]["from"]["task_id"] == next(t["id"] for t in old if (t["kind"], t["block"]) ==
                                                             ("image", "b3"))
    assert doc["block_counts"] == {"added": 1, "removed": 1, "changed": 1, "unchanged": 1}
    assert doc["media_counts"] == {"reused": 2, "new": 4, "superseded": 2}
    assert set(doc["cost"]) == {"from", "to"}
    # the default pair is the current version and the one before it
    assert api.get(f"/api/contents/{second['content_id']}/compare").json["to_version"] == 2


def test_comparing_an_unknown_version_is_404_and_a_bad_number_is_422(api):
    created = api.create(1)
    assert api.get(f"/api/contents/{created['content_id']}/compare?from=1&to=9").status_code == 404
    response = api.get(f"/api/contents/{created['content_id']}/compare?from=x&to=1")
    assert response.status_code == 422 and response.json["error"]["field"] == "from"
    assert api.get("/api/contents/999/compare").status_code == 404
    # one version only: nothing before it to compare it with; the request itself is valid, so not a 422
    response = api.get(f"/api/contents/{created['content_id']}/compare")
    assert response.status_code == 409 and response.json["error"]["code"] == "no_earlier_version"


# --- regenerate ------------------------------------------------------------------------------

def test_regenerating_an_image_needs_consent_then_makes_a_new_call_in_a_new_version(api, work, conn):
    created = api.create(2)
    work.until_idle()
    image = api.tasks_of(created)["image:b1"]
    url = f"/api/tasks/{image['id']}/regenerate"
    # without consent: 409, nothing saved
    refused = api.post(url, role="editor", json={"reason": "wrong season"})
    assert refused.status_code == 409 and refused.json["error"]["code"] == "new_charge_unconfirmed"
    assert api.post(url, role="editor", json={"accept_new_charge": True}).json["error"]["field"] == "reason"
    assert api.get(created["content_url"]).json["current_version"] == 1
    calls_before = len(work.executor.calls)
    # with consent
    response = api.post(url, role="editor", json={"accept_new_charge": True, "reason": "wrong season"})
    assert response.status_code == 202, response.json
    assert response.json["version"] == 2 and response.json["replaced_sha256"] == image["sha256"]
    work.until_idle()
    new = api.tasks_of({"status_url": response.json["status_url"]})
    # then: exactly the regenerated image was called for again; everything else was reused
    assert work.executor.calls[calls_before:].count(new["image:b1"]["id"]) == 1
    assert new["image:b1"]["id"] not in [e for e in work.executor.calls[:calls_before]]
    assert new["image:b1"]["sha256"] != image["sha256"] and new["image:b1"]["status"] == "succeeded"
    assert new["tts:b1"]["id"] not in work.executor.calls and new["image:b2"]["id"] not in work.executor.calls
    event = conn.execute("SELECT * FROM events WHERE action = 'regenerated'").fetchone()
    assert (event["actor"], event["reason"], event["task_id"]) == ("editor@example.com", "wrong season",
                                                                   new["image:b1"]["id"])
    assert event["details"]["replaced_sha256"] == image["sha256"] and event["details"]["replaced_task_id"] == image["id"]
    # the old asset stays reachable
    assert api.get(f"/media/{image['sha256']}").status_code == 200
    # and the compare says so
    media = {(m["block"], m["kind"]): m for m in api.get(f"/api/contents/{created['content_id']}/compare").json["media"]}
    assert media[("b1", "image")]["change"] == "new" and media[("b1", "image")]["regenerated"] is True
    assert media[("b1", "tts")]["change"] == "reused"


def test_a_later_edit_of_another_block_keeps_the_regenerated_picture(api, work):
    created = api.create(2)
    work.until_idle()
    image = api.tasks_of(created)["image:b1"]
    regenerated = api.post(f"/api/tasks/{image['id']}/regenerate", role="editor",
                           json={"accept_new_charge": True, "reason": "too dark"}).json
    work.until_idle()
    fresh = api.tasks_of({"status_url": regenerated["status_url"]})["image:b1"]["sha256"]
    # when: the editor changes block b2 only, as the editor sends it (no regeneration mark)
    third = edit(api, created, 2, [{"key": "b1", "text": "第1段：我们在学校学习。"}, {"key": "b2", "text": "改了。"}])
    work.until_idle()
    # then: b1's picture is the regenerated one, not the one the editor rejected
    assert api.tasks_of({"status_url": third["status_url"]})["image:b1"]["sha256"] == fresh != image["sha256"]


def test_regenerating_what_did_not_succeed_or_is_not_current_is_409(api, work):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    body = {"accept_new_charge": True, "reason": "x"}
    assert api.post(f"/api/tasks/{image['id']}/regenerate", role="editor", json=body).json["error"]["code"] == \
        "not_regenerable"
    work.until_idle()
    bundle = api.tasks_of(created)["bundle:"]
    assert api.post(f"/api/tasks/{bundle['id']}/regenerate", role="editor", json=body).status_code == 409
    edit(api, created, 1, [{"key": "b1", "text": "另一段。"}])
    response = api.post(f"/api/tasks/{image['id']}/regenerate", role="editor", json=body)
    assert response.status_code == 409 and response.json["error"]["code"] == "not_current"
    assert api.post("/api/tasks/999/regenerate", role="editor", json=body).status_code == 404
    assert api.post(f"/api/tasks/{image['id']}/regenerate", role="reviewer", json=body).status_code == 403


def test_a_regeneration_over_capacity_is_503_and_writes_nothing(database_url, redis_url, tmp_path, tokens, conn):
    api, work = api_and_work(database_url, redis_url, tmp_path / "media", tokens, MAX_PENDING_TASKS="4")
    first = api.create(1)
    work.until_idle()
    api.create(1)   # three pending of four
    image = api.tasks_of(first)["image:b1"]
    response = api.post(f"/api/tasks/{image['id']}/regenerate", role="editor",
                        json={"accept_new_charge": True, "reason": "again"})
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    assert api.get(first["content_url"]).json["current_version"] == 1
    assert conn.execute("SELECT count(*) AS n FROM events WHERE action = 'regenerated'").fetchone()["n"] == 0
    runtime.install(None)


def test_a_regenerated_call_books_against_the_budget_and_pauses_when_it_would_pass_it(
        database_url, redis_url, tmp_path, tokens, conn):
    # given: real local providers; an image costs 1 and a content may spend 2
    api, work = api_and_work(database_url, redis_url, tmp_path / "media", tokens, IMAGE_COST_PER_CALL="1",
                             CONTENT_BUDGET="2", providers=True)
    created = api.create(1)
    work.until_idle()
    body = {"accept_new_charge": True, "reason": "again"}
    # when: a first regeneration fits the budget, a second would pass it
    first = api.post(f"/api/tasks/{api.tasks_of(created)['image:b1']['id']}/regenerate", role="editor", json=body)
    assert first.status_code == 202 and first.json["estimated_cost"] == 1.0
    work.until_idle()
    second_image = api.tasks_of({"status_url": first.json["status_url"]})["image:b1"]
    assert second_image["status"] == "succeeded"
    second = api.post(f"/api/tasks/{second_image['id']}/regenerate", role="editor", json=body)
    assert second.status_code == 202
    work.until_idle()
    # then: the third call is not made; its task waits for the budget, and the content spent exactly 2
    third = api.tasks_of({"status_url": second.json["status_url"]})["image:b1"]
    assert (third["status"], third["waiting_for"]) == ("retry", "budget")
    assert float(conn.execute("SELECT spent FROM content_spend").fetchone()["spent"]) == 2.0
    runtime.install(None)


# --- reject, request changes, withdraw -------------------------------------------------------

def test_a_reviewer_rejects_or_asks_for_changes_with_a_note_recorded_on_the_versions_history(api, work, conn):
    created = api.create(1)
    work.until_idle()
    response = api.post(created["status_url"] + "/request-changes", role="reviewer",
                        json={"note": "the second picture is too dark"})
    assert response.status_code == 200 and response.json["decision"] == "changes_requested"
    assert api.post(created["status_url"] + "/reject", role="reviewer", json={"note": "off topic"}).status_code == 200
    board = api.get(created["status_url"]).json
    assert [(e["action"], e["actor"], e["reason"]) for e in board["events"]] == [
        ("changes_requested", "reviewer@example.com", "the second picture is too dark"),
        ("rejected", "reviewer@example.com", "off topic")]
    assert board["review"]["action"] == "rejected"
    # a note is required; an editor may not decide; an unknown version is 404
    assert api.post(created["status_url"] + "/reject", role="reviewer", json={}).json["error"]["field"] == "note"
    assert api.post(created["status_url"] + "/reject", role="editor", json={"note": "x"}).status_code == 403
    assert api.post(f"/api/contents/{created['content_id']}/versions/5/reject", role="reviewer",
                    json={"note": "x"}).status_code == 404
    # a rejected version may still be approved later, once it convinces
    assert api.approve(created).status_code == 200
    response = api.post(created["status_url"] + "/reject", role="reviewer", json={"note": "changed my mind"})
    assert response.status_code == 409 and response.json["error"]["code"] == "version_approved"


def test_withdrawing_an_approval_makes_delivery_answer_409_with_the_reason(api, work, conn):
    created = api.create(1)
    work.until_idle()
    api.approve(created)
    assert api.delivery(created).status_code == 200
    response = api.post(created["status_url"] + "/withdraw", role="reviewer", json={"note": "licence expired"})
    assert response.status_code == 200 and response.json["withdrawn_by"] == "reviewer@example.com"
    answer = api.delivery(created)
    assert answer.status_code == 409
    error = answer.json["error"]
    assert error["code"] == "not_deliverable" and "licence expired" in error["message"]
    assert error["details"]["reasons"] == ["not_approved", "approval_withdrawn"]
    assert error["details"]["withdrawn"]["note"] == "licence expired"
    assert error["details"]["withdrawn"]["by"] == "reviewer@example.com"
    assert api.get(created["content_url"]).json["approved_version"] is None
    board = api.get(created["status_url"]).json
    assert (board["is_approved"], board["approved_by"], board["approved_at"]) == (False, None, None)
    # withdrawing again: nothing to withdraw
    again = api.post(created["status_url"] + "/withdraw", role="reviewer", json={"note": "x"})
    assert again.status_code == 409 and again.json["error"]["code"] == "not_approved"
    # approving again delivers again, as a new approval
    assert api.approve(created).status_code == 200 and api.delivery(created).status_code == 200


# --- attention -------------------------------------------------------------------------------

def failed_and_unknown(api, work) -> tuple[dict, dict, dict]:
    created = api.create(2)
    tasks = api.tasks_of(created)
    work.executor.script[tasks["image:b1"]["id"]] = [Permanent("refused")]
    work.executor.script[tasks["image:b2"]["id"]] = [Ambiguous("lost")]
    work.until_idle()
    return created, tasks["image:b1"], tasks["image:b2"]


def test_the_attention_list_shows_what_needs_a_person_across_contents_with_what_each_allows(api, work, conn):
    created, failed, unknown = failed_and_unknown(api, work)
    other = api.create(1)   # nothing wrong with this one, until a budget pauses it
    paused = api.tasks_of(other)["tts:b1"]
    conn.execute("UPDATE tasks SET status = 'retry', waiting_for = 'budget', last_error = 'busy (BudgetReached: "
                 "paused: daily budget reached)' WHERE id = %s", (paused["id"],))
    stuck = api.tasks_of(other)["image:b1"]
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 minute' WHERE id = %s", (stuck["id"],))
    doc = api.get("/api/attention").json
    rows = {r["id"]: r for r in doc["items"]}
    assert (rows[failed["id"]]["problem"], rows[failed["id"]]["actions"]) == ("failed", ["retry"])
    assert rows[failed["id"]]["dead_letter"] == "permanent error"
    assert (rows[unknown["id"]]["problem"], rows[unknown["id"]]["actions"]) == (
        "unknown", ["retry_with_consent", "resolve_failed"])
    assert rows[paused["id"]]["problem"] == "budget" and rows[stuck["id"]]["problem"] == "stuck"
    assert doc["counts"] == {"unknown": 1, "failed": 1, "budget": 1, "stuck": 1, "revoked": 0, "refused": 0,
                             "model_gone": 0, "storage": 0}
    # filters
    assert [r["id"] for r in api.get("/api/attention?problem=unknown").json["items"]] == [unknown["id"]]
    assert {r["id"] for r in api.get(f"/api/attention?content_id={other['content_id']}").json["items"]} == {
        paused["id"], stuck["id"]}
    assert api.get("/api/attention?kind=tts").json["total"] == 1
    assert api.get("/api/attention?problem=bogus").status_code == 422
    assert api.get("/api/attention?limit=1").json["items"].__len__() == 1


def test_bulk_retry_reopens_failed_tasks_and_never_an_unknown_one(api, work, conn):
    created, failed, unknown = failed_and_unknown(api, work)
    response = api.post("/api/attention/retry", role="editor", json={"task_ids": [failed["id"], unknown["id"]]})
    assert response.status_code == 200
    assert response.json["done"] == [failed["id"]]
    assert [(r["task_id"], r["code"]) for r in response.json["refused"]] == [(unknown["id"], "needs_consent")]
    statuses = {t["id"]: t["status"] for t in api.tasks_of(created).values()}
    assert statuses[unknown["id"]] == "unknown" and statuses[failed["id"]] in ("ready", "running", "succeeded")
    assert conn.execute("SELECT count(*) AS n FROM events WHERE action = 'duplicate_risk_accepted'").fetchone()["n"] == 0
    assert api.post("/api/attention/retry", role="editor", json={"task_ids": []}).status_code == 422
    assert api.post("/api/attention/retry", role="reviewer", json={"task_ids": [1]}).status_code == 403


def test_bulk_resolve_closes_unknown_tasks_as_failed_with_one_note(api, work, conn):
    created, failed, unknown = failed_and_unknown(api, work)
    response = api.post("/api/attention/resolve", role="editor",
                        json={"task_ids": [unknown["id"], failed["id"]], "note": "dashboard shows nothing"})
    assert response.status_code == 200 and response.json["done"] == [unknown["id"]]
    assert response.json["refused"][0]["task_id"] == failed["id"]
    assert api.tasks_of(created)["image:b2"]["status"] == "failed"
    assert api.post("/api/attention/resolve", role="editor", json={"task_ids": [unknown["id"]]}).status_code == 422


def test_a_bulk_retry_over_capacity_is_503_and_retries_none(database_url, redis_url, tmp_path, tokens, conn):
    api, work = api_and_work(database_url, redis_url, tmp_path / "media", tokens, MAX_PENDING_TASKS="6")
    created = api.create(2)
    tasks = api.tasks_of(created)
    for key in ("image:b1", "image:b2", "tts:b1"):
        work.executor.script[tasks[key]["id"]] = [Permanent("refused")]
    work.until_idle()
    api.create(1)   # 3 pending, and the bundle of the first waits: 4 of 6
    ids = [tasks[k]["id"] for k in ("image:b1", "image:b2", "tts:b1")]
    response = api.post("/api/attention/retry", role="editor", json={"task_ids": ids})
    assert response.status_code == 503 and "Retry-After" in response.headers
    assert {r["status"] for r in conn.execute("SELECT status FROM tasks WHERE id = ANY(%s)", (ids,))} == {"failed"}
    runtime.install(None)


# --- contents search, download names, locales ------------------------------------------------

def test_the_contents_list_searches_titles_and_text_and_pages(api):
    api.post("/api/contents", json=lesson(1, title="Campus life", locale="en-US"), role="editor")
    api.post("/api/contents", json={**lesson(1, title="家庭"), "blocks": [{"key": "b1", "text": "妈妈在做饭 100%"}]},
             role="editor")
    api.post("/api/contents", json=lesson(1, title="旅行"), role="editor")
    assert [c["title"] for c in api.get("/api/contents?q=campus").json["items"]] == ["Campus life"]
    assert [c["title"] for c in api.get("/api/contents?q=做饭").json["items"]] == ["家庭"]
    assert api.get("/api/contents?q=100%25").json["total"] == 1 and api.get("/api/contents?q=_").json["total"] == 0
    page = api.get("/api/contents?limit=2&offset=2").json
    assert (page["total"], len(page["items"]), page["items"][0]["title"]) == (3, 1, "Campus life")
    assert api.get("/api/contents?q=" + "x" * 201).status_code == 422


def test_the_bundle_downloads_as_title_and_version_in_safe_characters(api, work):
    created = api.post("/api/contents", json=lesson(1, title="校园生活: 第1课/复习"), role="editor").json
    work.until_idle()
    api.approve(created)
    bundle = api.delivery(created).json["bundle"]
    assert bundle["file_name"] == "校园生活-第1课-复习-v1.zip"
    answer = api.client.get(bundle["url"])
    assert answer.status_code == 200
    # (the scripted executor stores its bundle as application/octet-stream: the extension is always the asset's own)
    assert "filename*=UTF-8''" in answer.headers["Content-Disposition"]
    assert "校园生活-第1课-复习-v1.bin" in unquote(answer.headers["Content-Disposition"])
    # a name that is not safe is no file at all, and no name changes what a file is
    sha = bundle["sha256"]
    assert api.get(f"/media/{sha}?name=../../etc/passwd.zip").status_code == 404
    assert "filename=x-v1.bin" in api.get(f"/media/{sha}?name=x-v1.exe").headers["Content-Disposition"]


def test_a_locale_the_speech_provider_cannot_speak_is_422_naming_the_supported_ones(api, conn):
    response = api.post("/api/contents", json=lesson(1, locale="fr-FR"), role="editor")
    assert response.status_code == 422
    error = response.json["error"]
    assert error["field"] == "locale" and "zh" in error["message"] and "en" in error["message"]
    assert conn.execute("SELECT count(*) AS n FROM contents").fetchone()["n"] == 0
    for locale in ("zh-CN", "en-GB", "en", "cmn-Hans-CN"):
        assert api.post("/api/contents", json=lesson(1, locale=locale), role="editor").status_code == 202, locale


def test_a_speech_provider_that_reads_any_language_accepts_any_locale(database_url, redis_url, tmp_path, tokens):
    app = make_app(database_url, redis_url, tmp_path / "media", TTS_PROVIDER="openai",
                   TTS_BASE_URL="http://127.0.0.1:9/v1", TTS_API_KEY="k", TTS_DAILY_BUDGET="unlimited")
    api = Api(app.test_client(), tokens)
    assert api.post("/api/contents", json=lesson(1, locale="fr-FR"), role="editor").status_code == 202
