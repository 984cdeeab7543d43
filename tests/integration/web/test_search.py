"""Searching and paging contents: a trigram index over each content's title and current text, and keyset paging
that stays as fast on the last page as on the first."""

from __future__ import annotations

import pytest

from testkit.helpers import lesson

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def test_search_finds_the_current_text_and_title_and_forgets_replaced_text(api):
    first = api.post("/api/contents", json={**lesson(1, prefix="熊猫"), "title": "动物园"}, role="editor").json
    api.post("/api/contents", json=lesson(1, prefix="长城"), role="editor")
    found = api.get("/api/contents?q=熊猫").json
    assert [i["id"] for i in found["items"]] == [first["content_id"]] and found["total"] == 1
    assert [i["id"] for i in api.get("/api/contents?q=动物").json["items"]] == [first["content_id"]]
    # a new version without the word: the content is no longer found by it
    content = api.get(first["content_url"]).json
    api.put(first["content_url"], role="editor", json={"title": "动物园", "locale": content["locale"],
                                                     "blocks": [{"key": "b1", "text": "老虎在睡觉。"}], "base_version": 1})
    assert api.get("/api/contents?q=熊猫").json["total"] == 0
    assert api.get("/api/contents?q=老虎").json["total"] == 1
    # % and _ are literal
    assert api.get("/api/contents?q=%25").json["total"] == 0


def test_a_search_uses_the_trigram_index(api, conn):
    api.post("/api/contents", json=lesson(1, prefix="索引"), role="editor")
    conn.execute("SET enable_seqscan = off")
    plan = "\n".join(r["QUERY PLAN"] for r in conn.execute(
        "EXPLAIN SELECT id FROM contents WHERE search_text ILIKE '%学校学习%'").fetchall())
    assert "contents_search" in plan, plan


def test_keyset_pages_cover_every_content_once_newest_first(api):
    made = [api.post("/api/contents", json=lesson(1, prefix=f"页{i}"), role="editor").json["content_id"]
            for i in range(7)]
    seen, before = [], None
    while True:
        page = api.get("/api/contents?limit=3" + (f"&before={before}" if before else "")).json
        seen += [i["id"] for i in page["items"]]
        before = page["next_before"]
        if before is None:
            break
    assert seen == sorted(made, reverse=True)


def test_an_offset_past_ten_thousand_is_refused_with_the_way_forward(api):
    refused = api.get("/api/contents?offset=10001")
    assert refused.status_code == 422 and refused.json["error"]["field"] == "offset"
