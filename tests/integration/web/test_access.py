"""Least privilege and what each answer may leak: a delivery key reads deliveries and nothing else, nobody
approves their own save (unless the operator allows it), an Idempotency-Key belongs to the API key that sent
it, nothing about drafts may be kept by a cache, and failed sign-ins are throttled and logged."""

from __future__ import annotations

import re

import pytest

from pipeline import keys, signins
from pipeline.core.errors import InvalidInput
from testkit.helpers import lesson
from testkit.pages import csrf_of, page
from testkit.webapp import Api, make_app


@pytest.fixture
def delivered(api, work) -> dict:
    return api.delivered(work)[0]


def test_a_delivery_key_reads_the_delivery_and_its_signed_media_only(app, api, delivered):
    content = delivered["content_id"]
    manifest = api.get(f"/api/contents/{content}/delivery", role="delivery")
    assert manifest.status_code == 200
    assert app.test_client().get(manifest.json["bundle"]["url"]).status_code == 200
    task_id = api.get(delivered["status_url"]).json["tasks"][0]["id"]
    sha = manifest.json["bundle"]["sha256"]
    for method, path in [("GET", "/api/contents"), ("GET", f"/api/contents/{content}"),
                         ("GET", delivered["status_url"]), ("GET", f"/api/tasks/{task_id}"),
                         ("GET", "/api/attention"), ("GET", "/api/spend"), ("GET", f"/media/{sha}"),
                         ("POST", "/api/contents")]:
        kw = {"json": lesson(1)} if method == "POST" else {}
        answer = api.call(method, path, role="delivery", **kw)
        assert answer.status_code == 403, (method, path, answer.status_code)


def test_a_delivery_key_cannot_sign_in_to_the_editors_pages(app, tokens):
    client = app.test_client()
    refused = client.post("/signin", data={"api_key": tokens["delivery"], "csrf_token": csrf_of(page(client,
                                                                                                  "/signin"))})
    assert refused.status_code == 401 and "deliveries" in refused.get_data(as_text=True)
    assert client.get("/").status_code == 302


def test_the_key_that_saved_a_version_may_not_approve_it(database_url, redis_url, media_dir, tokens, work):
    app = make_app(database_url, redis_url, media_dir, DEMO_MODE="false")
    api = Api(app.test_client(), tokens)
    created = api.create(1, role="admin")
    work.until_idle()
    refused = api.approve(created, role="admin")
    assert refused.status_code == 409 and refused.json["error"]["code"] == "self_approval"
    assert api.get(f"/api/contents/{created['content_id']}/delivery", role="reviewer").status_code == 409
    assert api.approve(created, role="reviewer").status_code == 200


def test_the_same_person_under_another_letter_case_may_not_approve_what_they_saved(database_url, redis_url,
                                                                                   media_dir, conn, work):
    # given: one person holding an editor's key and, made knowingly, a reviewer's key typed in capitals
    app = make_app(database_url, redis_url, media_dir, DEMO_MODE="false")
    editor = keys.create(conn, "alice@example.com", "editor")[1]
    reviewer = keys.create(conn, "ＡＬＩＣＥ@Example.com ", "reviewer", same_person=True)[1]
    other = keys.create(conn, "bob@example.com", "reviewer")[1]
    api = Api(app.test_client(), {"editor": editor, "reviewer": reviewer, "other": other})
    created = api.create(1, role="editor")
    work.until_idle()
    # then: four eyes compare people, not strings
    refused = api.approve(created, role="reviewer")
    assert refused.status_code == 409 and refused.json["error"]["code"] == "self_approval"
    assert api.approve(created, role="other").status_code == 200


def test_a_key_of_another_role_for_an_owner_who_holds_one_is_made_only_when_asked(conn):
    keys.create(conn, "carol@example.com", "editor")
    with pytest.raises(InvalidInput, match="already holds a live key as editor.*--same-person"):
        keys.create(conn, "Carol@Example.com", "reviewer")
    made, _ = keys.create(conn, "Carol@Example.com", "reviewer", same_person=True)
    assert made.owner == "carol@example.com"          # stored as it is compared
    keys.create(conn, "dave@example.com", "editor")
    keys.create(conn, "DAVE@example.com", "editor")    # a second key of the same role is no new risk


def test_self_approval_is_allowed_when_the_operator_says_so(database_url, redis_url, media_dir, tokens, work):
    app = make_app(database_url, redis_url, media_dir, DEMO_MODE="false", ALLOW_SELF_APPROVAL="true")
    api = Api(app.test_client(), tokens)
    created = api.create(1, role="admin")
    work.until_idle()
    assert api.approve(created, role="admin").status_code == 200


def test_an_idempotency_key_belongs_to_the_api_key_that_sent_it(api):
    body, headers = lesson(2), {"Idempotency-Key": "import-lessons.jsonl-line-1"}
    first = api.post("/api/contents", json=body, role="editor", headers=headers)
    again = api.post("/api/contents", json=body, role="editor", headers=headers)
    assert first.status_code == again.status_code == 202
    assert again.json["content_id"] == first.json["content_id"]        # the same key's retry: the same save
    # another key with the same body and the same Idempotency-Key makes its own content, and learns nothing of A's
    other = api.post("/api/contents", json=body, role="admin", headers=headers)
    assert other.status_code == 202 and other.json["content_id"] != first.json["content_id"]


@pytest.mark.parametrize("path", ["/api/contents", "/api/attention", "/api/spend", "/api/openapi.json"])
def test_json_answers_about_drafts_are_never_cached(api, delivered, path):
    answer = api.get(path)
    assert answer.status_code == 200 and answer.headers["Cache-Control"] == "no-store", path


def test_pages_and_error_answers_are_never_cached(app, api, delivered):
    assert api.get(delivered["status_url"]).headers["Cache-Control"] == "no-store"
    assert api.get("/api/contents/999999").headers["Cache-Control"] == "no-store"
    assert app.test_client().get("/signin").headers["Cache-Control"] == "no-store"


def test_failed_sign_ins_are_throttled_per_address_and_logged(app, tokens, capfd):
    client = app.test_client()
    for _ in range(signins.LIMIT):
        wrong = client.post("/signin", data={"api_key": "mp_wrong", "csrf_token": csrf_of(page(client, "/signin"))})
        assert wrong.status_code == 401
    # then even the right key waits, with Retry-After, until the window ends
    throttled = client.post("/signin", data={"api_key": tokens["editor"],
                                             "csrf_token": csrf_of(page(client, "/signin"))})
    assert throttled.status_code == 429
    assert 0 < int(throttled.headers["Retry-After"]) <= signins.WINDOW_SECONDS
    logged = capfd.readouterr().err
    assert logged.count('"signin_failed"') == signins.LIMIT and '"address": "127.0.0.1"' in logged
    assert '"signin_throttled"' in logged and "mp_wrong" not in logged
    # another address is not held back
    other = app.test_client()
    answer = other.post("/signin", data={"api_key": tokens["editor"], "csrf_token": csrf_of(page(other, "/signin"))},
                        environ_base={"REMOTE_ADDR": "127.0.0.2"})
    assert answer.status_code == 303, re.sub(r"\s+", " ", answer.get_data(as_text=True))[:300]
