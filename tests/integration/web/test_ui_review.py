"""The review workflow's pages: compare, regenerate with its confirmation, decisions on the board, the attention
page and its bulk actions, the contents search, all through the signed-in UI."""

from __future__ import annotations

import re

import pytest

from pipeline.core.errors import Ambiguous, Permanent
from testkit.helpers import claim
from testkit.pages import page, post, sign_in


def test_the_compare_page_shows_the_text_diff_and_what_each_media_became(app, tokens, api, work):
    created = api.create(2)
    work.until_idle()
    api.put(created["content_url"], role="editor", json={
        "title": "校园生活", "locale": "zh-CN", "base_version": 1,
        "blocks": [{"key": "b1", "text": "第1段：我们在学校学习。"}, {"key": "b2", "text": "第2段：我们在公园学习。"}]})
    work.until_idle()
    client = app.test_client()
    sign_in(client, tokens["editor"])
    board = page(client, f"/contents/{created['content_id']}/versions/2")
    assert f'/contents/{created["content_id"]}/compare?from=1&amp;to=2' in board
    html = page(client, f"/contents/{created['content_id']}/compare?from=1&to=2")
    assert "<del>学校</del><ins>公园</ins>" in html
    assert 'data-block="b1" data-change="unchanged"' in html and 'data-block="b2" data-change="changed"' in html
    assert html.count('data-media-change="reused"') == 2 and html.count('data-media-change="new"') == 2
    # each media shows its picture or plays its sound on both sides, not a digest to look up
    media = api.get(f"/api/contents/{created['content_id']}/compare?from=1&to=2").json["media"]
    for m in media:
        tag = "img" if m["kind"] == "image" else "audio"
        for side in ("from", "to"):
            assert re.search(rf'<{tag}[^>]* src="/media/{m[side]["sha256"]}"', html), (m["block"], m["kind"], side)


def test_the_compare_page_marks_whole_english_words(app, tokens, api, work):
    body = {"title": "Garden", "locale": "en-US", "blocks": [{"key": "b1", "text": "We saw the red flowers."}]}
    created = api.post("/api/contents", json=body, role="editor").json
    body["blocks"][0]["text"] = "We saw the red tulips."
    api.put(created["content_url"], role="editor", json={**body, "base_version": 1})
    client = app.test_client()
    sign_in(client, tokens["editor"])
    html = page(client, f"/contents/{created['content_id']}/compare?from=1&to=2")
    assert "We saw the red <del>flowers</del><ins>tulips</ins>." in html


def test_regenerating_from_the_board_asks_for_a_reason_and_consent_then_opens_the_new_version(app, tokens, api, work,
                                                                                               conn):
    created = api.create(1)
    work.until_idle()
    image = api.tasks_of(created)["image:b1"]
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    board = page(client, created["board_url"])
    assert f'href="/tasks/{image["id"]}/regenerate"' in board
    confirm = page(client, f"/tasks/{image['id']}/regenerate")
    assert 'name="accept_new_charge"' in confirm and 'name="reason"' in confirm
    # without the tick: nothing happens
    refused = post(client, csrf, f"/tasks/{image['id']}/regenerate", reason="too dark")
    assert refused.status_code == 303 and refused.headers["Location"].endswith(f"/tasks/{image['id']}/regenerate")
    assert api.get(created["content_url"]).json["current_version"] == 1
    done = post(client, csrf, f"/tasks/{image['id']}/regenerate", reason="too dark", accept_new_charge="yes")
    assert done.status_code == 303 and done.headers["Location"].endswith("/versions/2")
    html = page(client, done.headers["Location"])
    assert "too dark" in html and "data-regenerated" in html
    assert conn.execute("SELECT actor FROM events WHERE action = 'regenerated'").fetchone()["actor"] == \
        "editor@example.com"


def test_a_reviewer_records_a_decision_and_withdraws_an_approval_from_the_board(app, tokens, api, work):
    created = api.create(1)
    work.until_idle()
    client = app.test_client()
    csrf = sign_in(client, tokens["reviewer"])
    assert post(client, csrf, created["board_url"].replace("/versions/1", "/versions/1/decide"),
                decision="changes_requested", note="shorter, please").status_code == 303
    html = page(client, created["board_url"])
    assert 'data-review="changes_requested"' in html and "shorter, please" in html
    api.approve(created)
    html = page(client, created["board_url"])
    assert 'value="withdraw"' in html and 'value="rejected"' not in html
    post(client, csrf, created["board_url"].replace("/versions/1", "/versions/1/decide"), decision="withdraw",
         note="rights expired")
    assert 'data-review="approval_withdrawn"' in page(client, created["board_url"])
    delivery = page(client, f"/contents/{created['content_id']}/delivery")
    assert "rights expired" in delivery
    # an editor sees no decision form and may not post one
    editor = app.test_client()
    editor_csrf = sign_in(editor, tokens["editor"])
    assert "data-review-form" not in page(editor, created["board_url"])
    assert post(editor, editor_csrf, created["board_url"].replace("/versions/1", "/versions/1/decide"),
                decision="rejected", note="x").status_code == 403


def test_the_attention_page_lists_problems_and_retries_only_failed_tasks_in_bulk(app, tokens, api, work):
    created = api.create(2)
    tasks = api.tasks_of(created)
    failed, unknown = tasks["image:b1"], tasks["image:b2"]
    work.executor.script[failed["id"]] = [Permanent("refused")]
    work.executor.script[unknown["id"]] = [Ambiguous("lost")]
    work.until_idle()
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    html = page(client, "/attention")
    assert f'data-task="{failed["id"]}" data-problem="failed"' in html
    assert f'data-task="{unknown["id"]}" data-problem="unknown"' in html
    assert f'data-task="{unknown["id"]}"' not in page(client, "/attention?problem=failed")
    response = client.post("/attention", data={"csrf_token": csrf, "action": "retry",
                                               "task_id": [str(failed["id"]), str(unknown["id"])]})
    assert response.status_code == 303
    statuses = {t["id"]: t["status"] for t in api.tasks_of(created).values()}
    assert statuses[unknown["id"]] == "unknown" and statuses[failed["id"]] != "failed"
    assert "1 task changed; 1 left as they were" in page(client, "/attention")


def test_the_contents_page_searches_and_pages(app, tokens, api):
    for title in ("Campus life", "家庭", "旅行"):
        api.post("/api/contents", role="editor", json={"title": title, "locale": "zh-CN",
                                                       "blocks": [{"key": "b1", "text": f"{title} 的正文"}]})
    client = app.test_client()
    sign_in(client, tokens["editor"])
    html = page(client, "/?q=家庭")
    assert "家庭" in html and "Campus life" not in html and 'data-total="1"' in html
    assert "Nothing matches this search." in page(client, "/?q=nothing-like-this")
    assert 'data-total="3"' in page(client, "/")


@pytest.mark.server_major   # it claims a task as a worker does (attempt_claim)
def test_the_board_says_cancel_requested_while_a_call_runs_and_cancelled_once_nothing_does(app, tokens, api, work):
    # given: a version whose first image a worker holds, mid-call
    created = api.create(1)
    running = api.tasks_of(created)["image:b1"]
    assert claim(work.settings, running["id"]) is not None
    # when: an editor cancels it
    assert api.post(created["status_url"] + "/cancel", role="editor").status_code in (200, 202)
    client = app.test_client()
    sign_in(client, tokens["editor"])
    board = page(client, f"/contents/{created['content_id']}/versions/1")
    # then: the board says the cancel is asked, not done, while the call runs
    assert 'data-cancel="cancelling"' in board and "cancel requested by editor@example.com" in board
    assert "cancelled by" not in board
    # and: a version with nothing running says it is cancelled
    other = api.create(1)
    assert api.post(other["status_url"] + "/cancel", role="editor").status_code in (200, 202)
    board = page(client, f"/contents/{other['content_id']}/versions/1")
    assert 'data-cancel="cancelled"' in board and "cancelled by editor@example.com" in board
