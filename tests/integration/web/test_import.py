"""Bulk saves over the API (`"priority": "bulk"`) and `bin/import FILE.jsonl` against a live app."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from bin.importer import Answer, Importer, run
from testkit.helpers import lesson

ROOT = Path(__file__).resolve().parents[3]


def count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


def test_a_save_marked_bulk_is_saved_in_the_bulk_lane_and_left_to_the_dispatcher(api, conn):
    response = api.post("/api/contents", json={**lesson(2), "priority": "bulk"}, role="editor")
    assert response.status_code == 202
    assert conn.execute("SELECT lane FROM versions").fetchone()["lane"] == "bulk"
    rows = conn.execute("SELECT lane, sent_at FROM outbox").fetchall()
    assert len(rows) == 4 and all(r["lane"] == "bulk" and r["sent_at"] is None for r in rows)
    board = api.get(response.json["status_url"], role="reviewer").json
    assert board["priority"] == "bulk"


def test_a_save_without_priority_is_interactive(api, conn):
    response = api.post("/api/contents", json=lesson(1), role="editor")
    assert api.get(response.json["status_url"]).json["priority"] == "interactive"
    assert {r["lane"] for r in conn.execute("SELECT lane FROM outbox")} == {"interactive"}


@pytest.mark.parametrize("value", ["urgent", None, 1, ["bulk"]])
def test_an_unknown_priority_is_refused_naming_the_field(api, conn, value):
    response = api.post("/api/contents", json={**lesson(1), "priority": value}, role="editor")
    assert response.status_code == 422
    assert response.json["error"]["field"] == "priority"
    assert count(conn, "contents") == 0


def bin_import(server: str, key: str, path: Path, *args: str) -> subprocess.CompletedProcess:
    # -S: no site-packages at all, so the command needs nothing but the standard library
    return subprocess.run([sys.executable, "-S", str(ROOT / "bin" / "import"), str(path), "--url", server,
                           "--api-key", key, *args], capture_output=True, text=True, timeout=120, cwd="/")


def write_lines(path: Path, lines: list[object]) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line, ensure_ascii=False)) + "\n"
                            for line in lines))
    return path


def test_bin_import_saves_good_lines_in_bulk_reports_bad_ones_and_resumes(server, tokens, conn, tmp_path):
    good = [lesson(2, prefix="一"), lesson(1, prefix="二"), lesson(3, prefix="三")]
    path = write_lines(tmp_path / "lessons.jsonl", [
        good[0], '{"title": "broken", ', good[1], {**lesson(1), "blocks": []}, "", good[0], [1, 2]])
    # when the file is imported
    first = bin_import(server, tokens["editor"], path)
    # then the good lines are saved once each, in the bulk lane, and the bad ones are named by number
    assert first.returncode == 1, first.stderr
    assert "line 2: not valid JSON" in first.stderr
    assert "line 4: 422 invalid_input: blocks must be a non-empty list (field blocks)" in first.stderr
    assert "line 6: the same content as line 1" in first.stderr
    assert "line 7: expected a JSON object" in first.stderr
    assert "accepted now                           2" in first.stderr
    assert "refused lines: 2, 4, 7" in first.stderr
    assert count(conn, "contents") == 2 and count(conn, "tasks") == 5 + 3
    assert {r["lane"] for r in conn.execute("SELECT lane FROM versions")} == {"bulk"}
    # and a second run of the same file (now with a third good line) skips what was accepted
    write_lines(path, [good[0], good[1], good[2]])
    second = bin_import(server, tokens["editor"], path)
    assert second.returncode == 0, second.stderr
    assert "accepted by an earlier run (skipped)   2" in second.stderr
    assert "accepted now                           1" in second.stderr
    assert count(conn, "contents") == 3


def test_bin_import_stops_at_once_when_the_key_is_refused(server, conn, tmp_path):
    path = write_lines(tmp_path / "a.jsonl", [lesson(1), lesson(2)])
    result = bin_import(server, "not-a-key", path)
    assert result.returncode == 2
    assert "stopped at line 1: the API refused the key" in result.stderr and "not sent" in result.stderr
    assert count(conn, "contents") == 0


def test_an_import_waits_while_the_api_is_at_capacity_and_sends_the_same_line_again(tmp_path):
    answers = [Answer(503, {"error": {"code": "capacity_exceeded", "message": "full"}}, {"Retry-After": "7"}),
               Answer(202, {"content_id": 9}, {})]
    sent, slept = [], []

    def post(url, body, headers):
        sent.append((body["priority"], headers["Idempotency-Key"]))
        return answers.pop(0)
    out = io.StringIO()
    importer = Importer("http://api", "k", "batch", post=post, sleep=slept.append)
    code = run(write_lines(tmp_path / "b.jsonl", [lesson(1)]), importer, out)
    assert code == 0 and slept == [7.0]
    assert sent[0] == sent[1] and sent[0][0] == "bulk"
    assert "API busy; sending it again in 7 s" in out.getvalue()


def test_an_unreachable_api_stops_the_import_with_a_way_to_resume(tmp_path):
    def post(url, body, headers):
        raise ConnectionRefusedError(111, "Connection refused")
    out = io.StringIO()
    importer = Importer("http://api", "k", "batch", post=post, sleep=lambda s: None, tries=3)
    code = run(write_lines(tmp_path / "c.jsonl", [lesson(1), lesson(2)]), importer, out)
    assert code == 2
    assert "stopped at line 1: cannot reach http://api" in out.getvalue()
    assert "Run the same command again to resume" in out.getvalue()
