"""The approval record is the event history: who approved, withdrew or replaced which version, and when. The API,
the board, its version switcher and the delivery all say the same, and none of them trusts a stamp that outlived a
withdrawal."""

from __future__ import annotations

import re
from datetime import datetime

from testkit.helpers import lesson
from testkit.pages import page, sign_in


def _three_made_versions(api, work) -> dict:
    created = api.create(1)
    work.until_idle()
    for base in (1, 2):
        body = {**lesson(1, prefix=f"v{base + 1} "), "base_version": base}
        assert api.put(created["content_url"], json=body, role="editor").status_code == 202
        work.until_idle()
    return created


def _version_url(created: dict, version: int) -> str:
    return f"/api/contents/{created['content_id']}/versions/{version}"


def _ticks(html: str) -> list[str]:
    """The versions the board's switcher marks approved."""
    switcher = re.search(r'<nav class="versions[^"]*">(.*?)</nav>', html, re.S).group(1)
    return re.findall(r">v(\d+)[^<]*?✓", switcher)


def _last_approval(conn) -> dict:
    return conn.execute("SELECT version, actor, at FROM events WHERE action = 'approved' ORDER BY id DESC "
                        "LIMIT 1").fetchone()


def test_a_reapproval_by_another_person_is_the_approval_everywhere_and_a_withdrawal_leaves_no_tick(
        app, api, work, tokens, conn):
    # given: three made versions; the admin ("lab") approves version 1
    created = _three_made_versions(api, work)
    assert api.approve({"status_url": _version_url(created, 1)}, role="admin").status_code == 200
    board = app.test_client()
    sign_in(board, tokens["editor"])
    board_url = f"/contents/{created['content_id']}/versions/"
    # when: a reviewer approves version 3, withdraws it, and approves version 1 again
    assert api.approve({"status_url": _version_url(created, 3)}).status_code == 200
    assert _ticks(page(board, board_url + "3")) == ["3"]
    withdrawn = api.post(_version_url(created, 3) + "/withdraw", role="reviewer", json={"note": "wrong picture"})
    assert withdrawn.status_code == 200
    # then, in between: nothing is approved, and no page says otherwise
    assert api.delivery(created).json["error"]["details"]["reasons"] == ["not_approved", "approval_withdrawn"]
    for number in (1, 2, 3):
        assert _ticks(page(board, board_url + str(number))) == []
        doc = api.get(_version_url(created, number)).json
        assert (doc["is_approved"], doc["approved_by"], doc["approved_at"]) == (False, None, None)
    assert all(v["approved_by"] is None for v in api.get(created["content_url"]).json["versions"])
    # when: the reviewer approves version 1 again
    again = api.approve({"status_url": _version_url(created, 1)})
    assert again.status_code == 200
    last = _last_approval(conn)
    assert (last["version"], last["actor"]) == (1, "reviewer@example.com")
    # then: the reviewer at the later time, in the approval's answer, the version's API, the content's and the board
    assert again.json["approved_by"] == "reviewer@example.com"
    assert datetime.fromisoformat(again.json["approved_at"]) == last["at"]
    doc = api.get(_version_url(created, 1)).json
    assert (doc["is_approved"], doc["approved_by"]) == (True, "reviewer@example.com")
    assert datetime.fromisoformat(doc["approved_at"]) == last["at"]
    versions = {v["version"]: v for v in api.get(created["content_url"]).json["versions"]}
    assert [n for n, v in versions.items() if v["approved_by"]] == [1]
    assert versions[1]["approved_by"] == "reviewer@example.com"
    html = page(board, board_url + "1")
    assert "Approved by reviewer@example.com" in html and "Approved by admin@example.com" not in html
    assert last["at"].isoformat() in html
    for number in (1, 2, 3):
        assert _ticks(page(board, board_url + str(number))) == ["1"]
    # and the delivery serves version 1
    delivery = api.delivery(created)
    assert delivery.status_code == 200 and delivery.json["version"] == 1


def test_the_board_shows_the_approval_history_of_every_version_with_who_and_when(app, api, work, tokens, conn):
    # given: the same walk as above
    created = _three_made_versions(api, work)
    api.approve({"status_url": _version_url(created, 1)}, role="admin")
    api.approve({"status_url": _version_url(created, 3)})
    api.post(_version_url(created, 3) + "/withdraw", role="reviewer", json={"note": "wrong picture"})
    api.approve({"status_url": _version_url(created, 1)})
    # when
    doc = api.get(_version_url(created, 2)).json
    # then: every step, newest last, on any version's board, with the version it concerned
    assert [(a["action"], a["version"], a["by"]) for a in doc["approvals"]] == [
        ("approved", 1, "admin@example.com"),
        ("replaced", 1, "reviewer@example.com"), ("approved", 3, "reviewer@example.com"),
        ("withdrawn", 3, "reviewer@example.com"),
        ("approved", 1, "reviewer@example.com")]
    assert doc["approvals"][1]["by_version"] == 3 and doc["approvals"][3]["note"] == "wrong picture"
    times = [datetime.fromisoformat(a["at"]) for a in doc["approvals"]]
    assert times == sorted(times)
    client = app.test_client()
    sign_in(client, tokens["editor"])
    html = page(client, f"/contents/{created['content_id']}/versions/2")
    history = re.search(r'<section class="panel approvals"[^>]*>(.*?)</section>', html, re.S).group(1)
    assert history.count("<li") == 5 and "wrong picture" in history
