"""The editors' pages: sign-in session, CSRF on every form, and each page rendering what it must."""

from __future__ import annotations

import re

import pytest

from pipeline import keys
from pipeline.core.errors import Ambiguous, Permanent
from receipts.calls import Intent, ReceiptBook
from testkit.pages import Forms, csrf_of, page, post, sign_in


@pytest.fixture
def browser(app, tokens):
    """A signed-in editor's client and its CSRF token."""
    client = app.test_client()
    return client, sign_in(client, tokens["admin"])


def test_pages_need_a_signed_in_key(app):
    client = app.test_client()
    for url in ("/", "/contents/new", "/contents/1/versions/1", "/tasks/1", "/contents/1/delivery"):
        response = client.get(url)
        assert response.status_code == 302 and response.headers["Location"].startswith("/signin")


def test_signing_in_sets_an_http_only_same_site_session_cookie(app, tokens):
    client = app.test_client()
    token_field = csrf_of(page(client, "/signin"))
    response = client.post("/signin", data={"api_key": tokens["editor"], "csrf_token": token_field, "next": "/"})
    assert response.status_code == 303 and response.headers["Location"] == "/"
    cookie = next(c for c in response.headers.getlist("Set-Cookie") if c.startswith("mediapipe_session="))
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie and tokens["editor"] not in cookie
    assert "editor@example.com" in page(client, "/")


def test_an_unknown_key_cannot_sign_in(app):
    client = app.test_client()
    token_field = csrf_of(page(client, "/signin"))
    response = client.post("/signin", data={"api_key": "mp_wrong", "csrf_token": token_field})
    assert response.status_code == 401 and "unknown or revoked" in response.get_data(as_text=True)


def test_sign_in_never_redirects_off_site(app, tokens):
    client = app.test_client()
    token_field = csrf_of(page(client, "/signin"))
    response = client.post("/signin", data={"api_key": tokens["editor"], "csrf_token": token_field,
                                            "next": "//evil.example/"})
    assert response.headers["Location"] == "/"


def test_a_post_without_the_csrf_token_is_400_and_changes_nothing(app, browser, api, conn):
    client, csrf = browser
    created = api.create(1)
    assert client.post("/signin", data={"api_key": "x"}).status_code == 400
    url = f"/contents/{created['content_id']}/versions/1/cancel"
    assert client.post(url).status_code == 400
    assert client.post(url, data={"csrf_token": "forged"}).status_code == 400
    assert conn.execute("SELECT cancel_requested_at FROM versions").fetchone()["cancel_requested_at"] is None
    assert post(client, csrf, url).status_code == 303


def test_every_form_on_every_page_carries_the_csrf_token(app, browser, api, work):
    client, csrf = browser
    created = api.create(2)
    tasks = api.get(created["status_url"]).json["tasks"]
    work.executor.script[tasks[0]["id"]] = [Ambiguous("lost")]
    work.executor.script[tasks[1]["id"]] = [Permanent("refused")]
    work.until_idle()
    cid = created["content_id"]
    pages = ["/", "/contents/new", f"/contents/{cid}/edit", f"/contents/{cid}/versions/1",
             f"/contents/{cid}/versions/1/live", f"/tasks/{tasks[0]['id']}", f"/tasks/{tasks[1]['id']}",
             f"/contents/{cid}/delivery", f"/tasks/{tasks[2]['id']}/regenerate", "/attention",
             f"/contents/{cid}/compare?from=1&to=1"]
    seen = 0
    for url in pages:
        for form in Forms(page(client, url)).forms:
            if form["method"] == "get":   # a search or a filter: it reads, and its query names no secret
                assert "csrf_token" not in form["inputs"], (url, form)
                continue
            assert form["method"] == "post", (url, form)
            assert form["inputs"]["csrf_token"]["value"] == csrf, (url, form["action"])
            seen += 1
    assert seen >= 14


def test_a_revoked_key_ends_its_session(app, browser, conn, tokens):
    client, _ = browser
    keys.revoke(conn, keys.authenticate(conn, tokens["admin"]).key_id)
    assert client.get("/").status_code == 302


def test_the_contents_list_shows_versions_and_a_progress_bar(browser, api, work):
    client, _ = browser
    created = api.create(1)
    work.until_idle()
    api.approve(created, role="reviewer")
    html = page(client, "/")
    assert "校园生活" in html and 'class="progress"' in html and "3/3 done" in html
    assert f'/contents/{created["content_id"]}/delivery">v1' in html


def test_the_editor_saves_a_new_version_and_says_which_media_will_be_reused(browser, api, work, conn):
    client, csrf = browser
    response = post(client, csrf, "/contents/new", title="My day", locale="en-US", theme="",
                    block_key=["b1", "b2", ""], block_text=["I wake up.", "I eat.", ""],
                    block_prompt=["", "", ""])
    assert response.status_code == 303 and response.headers["Location"] == "/contents/1/versions/1"
    assert "0 of 4 media will be reused" in page(client, "/contents/1/versions/1")
    work.until_idle()
    # reorder the blocks and change one text: the unchanged block's media is reused
    response = post(client, csrf, "/contents/1/edit", base_version="1", title="My day", locale="en-US",
                    block_key=["b2", "b1"], block_text=["I eat lunch.", "I wake up."], block_prompt=["", ""])
    assert response.status_code == 303 and response.headers["Location"] == "/contents/1/versions/2"
    assert "2 of 4 media will be reused from earlier work (blocks b1 unchanged); new media for b2" in page(
        client, "/contents/1/versions/2")
    assert [b["key"] for b in conn.execute("SELECT blocks FROM versions WHERE version = 2").fetchone()["blocks"]] \
        == ["b2", "b1"]


def test_the_editor_shows_invalid_input_and_stale_versions_in_words(browser, api):
    client, csrf = browser
    response = post(client, csrf, "/contents/new", title="", locale="en-US", block_key=["b1"], block_text=["x"],
                    block_prompt=[""])
    assert response.status_code == 422 and "title must not be empty" in response.get_data(as_text=True)
    api.create(1)
    api.put("/api/contents/1", json={"title": "t", "locale": "zh-CN", "blocks": [{"key": "a", "text": "新"}],
                                     "base_version": 1}, role="editor")
    response = post(client, csrf, "/contents/1/edit", base_version="1", title="t", locale="zh-CN",
                    block_key=["a"], block_text=["旧"], block_prompt=[""])
    assert response.status_code == 409 and "is not the latest version (2)" in response.get_data(as_text=True)


def test_the_board_shows_media_players_chips_and_the_approve_state(browser, api, work, app, tokens):
    client, csrf = browser
    created = api.create(1)
    url = created["board_url"]
    html = page(client, url)
    assert 'data-running="true"' in html and "attempt 0/3" in html
    assert re.search(r'<button type="submit" class="primary" disabled[^>]*>Approve version 1', html)
    assert "not every image and narration has succeeded: 2 ready" in html
    work.until_idle()
    html = page(client, url)
    assert 'data-running="false"' in html and "<audio controls" in html and "<img src=\"/media/" in html
    assert re.search(r'<button type="submit" class="primary" >Approve version 1', html)
    # an editor sees no approve button at all
    editor = app.test_client()
    sign_in(editor, tokens["editor"])
    assert "Approve version" not in page(editor, url)


def test_the_board_explains_an_unknown_outcome_and_guards_retry_anyway(browser, api, work, conn):
    client, csrf = browser
    created = api.create(1)
    image = api.get(created["status_url"]).json["tasks"][0]
    work.executor.script[image["id"]] = [Ambiguous("read timeout after send")]
    work.until_idle()
    html = page(client, created["board_url"])
    assert "may have done this work and charged for it" in html
    retry_form = next(f for f in Forms(html).forms if f["action"] == f"/tasks/{image['id']}/retry")
    assert "required" in retry_form["inputs"]["accept_duplicate_risk"]
    # without the confirmation nothing changes
    response = post(client, csrf, f"/tasks/{image['id']}/retry")
    assert response.status_code == 303
    assert "Not retried" in page(client, created["board_url"])
    assert conn.execute("SELECT status FROM tasks WHERE id = %s", (image["id"],)).fetchone()["status"] == "unknown"
    post(client, csrf, f"/tasks/{image['id']}/retry", accept_duplicate_risk="yes")
    assert conn.execute("SELECT status FROM tasks WHERE id = %s", (image["id"],)).fetchone()["status"] == "ready"


def test_mark_as_failed_from_the_task_page(browser, api, work, conn):
    client, csrf = browser
    created = api.create(1)
    image = api.get(created["status_url"]).json["tasks"][0]
    work.executor.script[image["id"]] = [Ambiguous("lost")]
    work.until_idle()
    response = post(client, csrf, f"/tasks/{image['id']}/resolve", note="no such request at the vendor", back="task")
    assert response.status_code == 303 and response.headers["Location"] == f"/tasks/{image['id']}"
    html = page(client, f"/tasks/{image['id']}")
    assert "Closed as failed by an editor" in html and "resolved failed" in html


def test_the_task_page_shows_the_timeline_calls_and_receipts(browser, api, work, media_dir):
    client, _ = browser
    created = api.create(1)
    work.until_idle()
    image = api.get(created["status_url"]).json["tasks"][0]
    ReceiptBook(media_dir).write_intent(Intent(image["id"], 1, "lease", "local-image", "m", "f" * 64, "key-1", 1.0))
    html = page(client, f"/tasks/{image['id']}")
    assert "ready → running" in html and "running → succeeded" in html
    assert "0001-intent.json" in html and "key-1" in html


def test_the_delivery_page_explains_why_not_then_offers_the_bundle(browser, api, work):
    client, csrf = browser
    created = api.create(1)
    html = page(client, f"/contents/{created['content_id']}/delivery")
    assert "Not deliverable yet" in html and "No version is approved yet" in html
    work.until_idle()
    post(client, csrf, created["board_url"] + "/approve")
    html = page(client, f"/contents/{created['content_id']}/delivery")
    assert "Delivering version 1" in html and "Download the bundle" in html


def test_a_reviewer_cannot_open_the_editor(app, tokens):
    client = app.test_client()
    sign_in(client, tokens["reviewer"])
    assert client.get("/contents/new").status_code == 403


def test_unknown_pages_are_404(browser):
    client, _ = browser
    assert client.get("/contents/99/versions/1").status_code == 404
    assert client.get("/tasks/99").status_code == 404


def test_a_demo_lesson_can_be_started_from_the_contents_page(browser, conn):
    client, csrf = browser
    response = post(client, csrf, "/demo", theme="campus life", scenario="")
    assert response.status_code == 303
    assert conn.execute("SELECT title, locale FROM contents").fetchone() == {"title": "Campus life",
                                                                             "locale": "en-US"}


def test_the_editor_refuses_text_the_database_cannot_store(browser):
    client, csrf = browser
    response = post(client, csrf, "/contents/new", title="a\x00b", locale="en-US", block_key=["b1"],
                    block_text=["x"], block_prompt=[""])
    assert response.status_code == 422 and "NUL character" in response.get_data(as_text=True)


def test_the_spend_page_shows_budgets_and_refuses_a_bad_content_id(browser, api, work):
    client, _ = browser
    created = api.create(1)
    work.until_idle()
    html = page(client, "/spend")
    assert "Budgets today" in html and "local-image" in html and "no limit" in html
    assert "Inputs paid for more than once" in page(client, f"/spend?content={created['content_id']}")
    assert client.get("/spend?content=abc").status_code == 422
    assert client.get("/spend?content=999999").status_code == 404


def test_the_spend_api_needs_a_key_and_names_unknown_contents(api, app):
    assert app.test_client().get("/api/spend").status_code == 401
    assert api.get("/api/spend").status_code == 200
    assert api.get("/api/contents/999999/spend").status_code == 404
