"""A request id per HTTP request ties its log lines together and comes back in X-Request-Id."""

from __future__ import annotations

import json

from testkit.helpers import lesson
from testkit.webapp import Api, make_app


def lines(captured: str) -> list[dict]:
    return [json.loads(line) for line in captured.splitlines() if line.startswith("{")]


def test_every_log_line_of_a_save_carries_its_request_id_which_the_answer_returns(api, capsys):
    capsys.readouterr()
    first = api.post("/api/contents", json=lesson(1), role="editor")
    first_logged = lines(capsys.readouterr().err)
    second = api.post("/api/contents", json=lesson(1, prefix="二"), role="editor")
    second_logged = lines(capsys.readouterr().err)
    assert first.status_code == second.status_code == 202
    rid = first.headers["X-Request-Id"]
    assert len(rid) == 32 and rid != second.headers["X-Request-Id"]
    # the save, each message sent by the fast path, and the request itself: all carry the save's id
    events = [line["event"] for line in first_logged]
    assert events.count("saved") == 1 and events.count("dispatched") == 2 and events[-1] == "request"
    assert {line.get("request_id") for line in first_logged} == {rid}
    saved = next(line for line in first_logged if line["event"] == "saved")
    assert (saved["content_id"], saved["version"]) == (first.json["content_id"], 1)
    assert {line.get("request_id") for line in second_logged} == {second.headers["X-Request-Id"]}
    # and nothing logged outside a request carries one
    from pipeline.log import log
    log("outside")
    assert "request_id" not in lines(capsys.readouterr().err)[0]


def test_a_request_id_from_the_caller_is_kept_only_behind_a_trusted_proxy_and_only_when_sane(
        database_url, redis_url, media_dir, tokens, capsys):
    direct = Api(make_app(database_url, redis_url, media_dir).test_client(), tokens)
    proxied = Api(make_app(database_url, redis_url, media_dir, TRUSTED_PROXIES="1").test_client(), tokens)
    sent = {"X-Request-Id": "lb-2026-abcdef12"}
    assert direct.get("/api/contents", headers=sent).headers["X-Request-Id"] != "lb-2026-abcdef12"
    capsys.readouterr()
    response = proxied.post("/api/contents", json=lesson(1), role="editor", headers=sent)
    assert response.headers["X-Request-Id"] == "lb-2026-abcdef12"
    assert {line.get("request_id") for line in lines(capsys.readouterr().err)} == {"lb-2026-abcdef12"}
    for insane in ("short", "x" * 65, "two words here", "inject\"quote1"):
        assert proxied.get("/api/contents", headers={"X-Request-Id": insane}).headers["X-Request-Id"] != insane

