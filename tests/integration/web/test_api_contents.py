"""Saving and reading contents over the API: 202 with Location, idempotency, validation, capacity, staleness."""

from __future__ import annotations

import json

import pytest

from testkit.helpers import lesson
from testkit.webapp import Api, make_app


def count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


def test_creating_content_answers_202_with_the_version_to_poll(api, conn):
    response = api.post("/api/contents", json=lesson(2), role="editor")
    assert response.status_code == 202
    body = response.json
    assert response.headers["Location"] == f"/api/contents/{body['content_id']}/versions/1" == body["status_url"]
    assert body["version"] == 1
    # the save was recorded by the key's owner and its runnable tasks were sent at once (fast path)
    assert conn.execute("SELECT saved_by FROM versions").fetchone()["saved_by"] == "editor@example.com"
    assert count(conn, "tasks") == 5
    assert conn.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NOT NULL").fetchone()["n"] == 4


def test_the_same_idempotency_key_and_body_return_the_first_answer(api, conn):
    first = api.post("/api/contents", json=lesson(2), role="editor", headers={"Idempotency-Key": "k-1"})
    again = api.post("/api/contents", json=lesson(2), role="editor", headers={"Idempotency-Key": "k-1"})
    assert (first.status_code, again.status_code) == (202, 202)
    assert again.json == first.json and again.headers["Location"] == first.headers["Location"]
    assert again.headers["Idempotent-Replayed"] == "true"
    assert count(conn, "contents") == 1 and count(conn, "tasks") == 5


def test_the_same_idempotency_key_with_another_body_is_422(api, conn):
    api.post("/api/contents", json=lesson(2), role="editor", headers={"Idempotency-Key": "k-2"})
    other = api.post("/api/contents", json=lesson(3), role="editor", headers={"Idempotency-Key": "k-2"})
    assert other.status_code == 422
    assert other.json["error"]["code"] == "idempotency_key_reused"
    assert count(conn, "contents") == 1


def test_an_unusable_idempotency_key_is_400(api, conn):
    response = api.post("/api/contents", json=lesson(1), role="editor", headers={"Idempotency-Key": "x" * 201})
    assert response.status_code == 400 and response.json["error"]["field"] == "Idempotency-Key"
    assert count(conn, "contents") == 0


def _with(**changes):
    body = lesson(2)
    for path, value in changes.items():
        target, *rest = path.split("__")
        if rest:
            body["blocks"][int(rest[0])][rest[1]] = value
        elif value is ...:
            body.pop(target)
        else:
            body[target] = value
    return body


@pytest.mark.parametrize("body, field", [
    (_with(title=...), "title"),
    (_with(title="   "), "title"),
    (_with(title="t" * 201), "title"),
    (_with(locale="chinese"), "locale"),
    (_with(blocks=[]), "blocks"),
    (_with(blocks="nope"), "blocks"),
    (_with(blocks=[{"key": "a", "text": "x"}] * 2), "blocks[1].key"),
    (_with(blocks__0__text=""), "blocks[0].text"),
    (_with(blocks__0__text="字" * 2001), "blocks[0].text"),
    (_with(blocks__0__key="../etc"), "blocks[0].key"),
    (_with(blocks__1__image_prompt=7), "blocks[1].image_prompt"),
    (["not", "an", "object"], "body"),
], ids=lambda v: v if isinstance(v, str) else None)
def test_an_invalid_body_is_422_naming_the_field_and_writes_nothing(api, conn, body, field):
    response = api.post("/api/contents", json=body, role="editor")
    assert response.status_code == 422, response.json
    assert response.json["error"]["field"] == field and response.json["error"]["message"]
    assert count(conn, "contents") == 0


@pytest.mark.parametrize("data", [b"{not json", b"", "{\"title\": \"\xe4\"".encode("latin-1")])
def test_a_malformed_json_body_is_400(api, data):
    response = api.post("/api/contents", data=data, content_type="application/json", role="editor")
    assert response.status_code == 400 and response.json["error"]["code"] == "invalid_json"


def test_a_body_over_one_mebibyte_is_413_naming_the_limit(api, app, tokens):
    response = api.post("/api/contents", data=b"{" + b" " * (1024 * 1024 + 10) + b"}",
                        content_type="application/json", role="editor")
    assert response.status_code == 413 and response.json["error"]["code"]
    assert "1 MiB" in response.json["error"]["message"]
    # and the page a person gets says it in their words
    from testkit.pages import sign_in
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    page = client.post("/contents/new", data={"csrf_token": csrf, "title": "x" * (2 << 20)})
    assert page.status_code == 413 and "The limit is 1 MiB per request." in page.get_data(as_text=True)


def test_over_capacity_is_503_with_retry_after_and_nothing_written(database_url, redis_url, media_dir, tokens, conn):
    api = Api(make_app(database_url, redis_url, media_dir, MAX_PENDING_TASKS="6").test_client(), tokens)
    assert api.post("/api/contents", json=lesson(1), role="editor").status_code == 202   # 3 tasks pending
    before = {t: count(conn, t) for t in ("contents", "versions", "tasks", "outbox", "events")}
    response = api.post("/api/contents", json=lesson(2), role="editor")                   # would make 8
    assert response.status_code == 503
    assert int(response.headers["Retry-After"]) >= 1 and response.json["error"]["code"] == "over_capacity"
    assert {t: count(conn, t) for t in before} == before


def test_a_new_version_on_the_latest_base_is_202(api, conn):
    created = api.create(2)
    response = api.put(f"/api/contents/{created['content_id']}", json={**lesson(2, prefix="新"), "base_version": 1},
                       role="editor")
    assert response.status_code == 202
    assert response.json["version"] == 2 and response.headers["Location"].endswith("/versions/2")


def test_a_stale_base_version_is_409_and_writes_nothing(api, conn):
    created = api.create(1)
    url = f"/api/contents/{created['content_id']}"
    assert api.put(url, json={**lesson(1, prefix="a"), "base_version": 1}, role="editor").status_code == 202
    tasks = count(conn, "tasks")
    stale = api.put(url, json={**lesson(1, prefix="b"), "base_version": 1}, role="editor")
    assert stale.status_code == 409
    assert stale.json["error"]["code"] == "stale_base_version"
    assert stale.json["error"]["details"] == {"current_version": 2}
    assert count(conn, "tasks") == tasks


def test_a_new_version_needs_a_base_version(api):
    created = api.create(1)
    response = api.put(f"/api/contents/{created['content_id']}", json=lesson(1), role="editor")
    assert response.status_code == 422 and response.json["error"]["field"] == "base_version"


def test_saving_a_version_of_unknown_content_is_404(api):
    response = api.put("/api/contents/999", json={**lesson(1), "base_version": 1}, role="editor")
    assert response.status_code == 404


def test_reading_a_content_item_lists_its_versions(api):
    created = api.create(1)
    body = api.get(f"/api/contents/{created['content_id']}").json
    assert body["current_version"] == 1 and body["approved_version"] is None
    assert [v["version"] for v in body["versions"]] == [1] and body["blocks"][0]["key"] == "b1"


def test_a_version_shows_every_task_with_its_state_and_a_progress_summary(api, work):
    created = api.create(1)
    version = api.get(created["status_url"]).json
    assert version["progress"] == {"total": 3, "succeeded": 0, "percent": 0, "counts": {"ready": 3}}
    assert [(t["kind"], t["block"], t["status"]) for t in version["tasks"]] == [
        ("image", "b1", "ready"), ("tts", "b1", "ready"), ("bundle", None, "ready")]
    work.until_idle()
    done = api.get(created["status_url"]).json
    assert done["progress"]["percent"] == 100 and done["approvable"] is True
    image = done["tasks"][0]
    assert image["attempts"] == 1 and image["next_attempt_at"] is None and image["last_error"] is None
    assert image["asset_url"] == f"/media/{image['sha256']}" and len(image["sha256"]) == 64
    assert [e["to_status"] for e in image["events"]] == ["running", "succeeded"]


@pytest.mark.parametrize("url", ["/api/contents/999", "/api/contents/999/versions/1", "/api/contents/1/versions/9",
                                 "/api/contents/999999999999999999999", "/api/contents/0", "/api/contents/-1",
                                 "/api/contents/1/versions/99999999999", "/api/tasks/999", "/api/nothing"])
def test_unknown_ids_and_paths_are_404_in_json(api, url):
    api.create(1)
    response = api.get(url)
    assert response.status_code == 404 and response.json["error"]["code"] == "not_found"


def test_a_wrong_method_is_405_in_json(api):
    response = api.call("DELETE", "/api/contents")
    assert response.status_code == 405 and response.json["error"]["code"] == "method_not_allowed"


def test_the_contents_list_shows_current_and_approved_versions_with_progress(api):
    api.create(1)
    body = api.get("/api/contents?limit=5").json
    assert body["total"] == 1 and body["limit"] == 5
    item = body["items"][0]
    assert item["current_version"] == 1 and item["approved_version"] is None
    assert item["progress"]["total"] == 3


@pytest.mark.parametrize("text, field", [("a\u0000b", "blocks[0].text"), ("\ud800", "blocks[0].text")])
def test_text_the_database_cannot_store_is_422_not_500(api, conn, text, field):
    body = lesson(1)
    body["blocks"][0]["text"] = text
    raw = json.dumps(body).encode()   # escaped, as a client would send a lone surrogate
    response = api.post("/api/contents", data=raw, content_type="application/json", role="editor")
    assert response.status_code == 422 and response.json["error"]["field"] == field
    assert count(conn, "contents") == 0
