"""Spend that cannot run away: every action that can cause a paid call books its estimate against the key's
KEY_DAILY_SPEND, and past it the action is 429 and writes nothing; a revoked key's unstarted work can be
cancelled, recorded and listed for a person."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pipeline.core.errors import Permanent
from testkit.helpers import lesson
from testkit.system import ROOT
from testkit.webapp import api_and_work

# 3-block lessons: 3 images at 0.04 and 3 narrations at 0.01 = 0.15 a save of new inputs
COSTS = {"IMAGE_COST_PER_CALL": "0.04", "TTS_COST_PER_CALL": "0.01"}


def count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


@pytest.fixture
def capped(database_url, redis_url, media_dir, tokens):
    return api_and_work(database_url, redis_url, media_dir, tokens, KEY_DAILY_SPEND="0.35", **COSTS)


def test_saves_past_the_keys_daily_spend_are_429_and_write_nothing(capped, conn):
    api, _ = capped
    assert api.post("/api/contents", json=lesson(3, prefix="a"), role="editor").status_code == 202
    assert api.post("/api/contents", json=lesson(3, prefix="b"), role="editor").status_code == 202
    before = {t: count(conn, t) for t in ("contents", "versions", "tasks", "outbox")}
    refused = api.post("/api/contents", json=lesson(3, prefix="c"), role="editor")
    assert refused.status_code == 429 and refused.json["error"]["code"] == "key_limit_reached"
    assert "KEY_DAILY_SPEND" in refused.json["error"]["message"] and int(refused.headers["Retry-After"]) >= 1
    assert {t: count(conn, t) for t in before} == before
    # another key has a day of its own
    assert api.post("/api/contents", json=lesson(3, prefix="c"), role="admin").status_code == 202


def test_inputs_with_stored_media_cost_nothing(capped, conn):
    api, work = capped
    assert api.post("/api/contents", json=lesson(3, prefix="same"), role="editor").status_code == 202
    work.until_idle()
    booked = conn.execute("SELECT estimated::float AS e FROM key_spend").fetchone()["e"]
    assert booked == pytest.approx(0.15)
    # the same lesson saved again reuses every asset: nothing more is booked, so the limit is not nearer
    for _ in range(3):
        assert api.post("/api/contents", json=lesson(3, prefix="same"), role="editor").status_code == 202
    assert conn.execute("SELECT estimated::float AS e FROM key_spend").fetchone()["e"] == pytest.approx(0.15)


def test_retries_reruns_and_bulk_retries_book_too(database_url, redis_url, media_dir, tokens, conn):
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, KEY_DAILY_SPEND="0.30", **COSTS)
    created = api.post("/api/contents", json=lesson(3, prefix="r"), role="editor").json   # 0.15 booked
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Permanent("refused")] * 10
    work.until_idle()
    assert api.tasks_of(created)["image:b1"]["status"] == "failed"
    # each retry of the failed image books 0.04: three fit under the limit with the save's 0.15, the fourth not
    for _ in range(3):
        assert api.post(f"/api/tasks/{image['id']}/retry", role="editor").status_code == 202
        work.until_idle()
    refused = api.post(f"/api/tasks/{image['id']}/retry", role="editor")
    assert refused.status_code == 429 and refused.json["error"]["code"] == "key_limit_reached"
    assert api.tasks_of(created)["image:b1"]["status"] == "failed"            # the refused retry changed nothing
    bulk = api.post("/api/attention/retry", role="editor", json={"task_ids": [image["id"]]})
    assert bulk.status_code == 429
    rerun = api.post(f"/api/tasks/{image['id']}/rerun", role="editor", json={"why": "provider fixed"})
    assert rerun.status_code == 429
    assert api.tasks_of(created)["image:b1"]["status"] == "failed"


def test_revoking_a_key_can_cancel_its_unstarted_work_for_a_person_to_see(capped, conn, database_url):
    api, _ = capped
    created = api.post("/api/contents", json=lesson(3, prefix="stolen"), role="editor").json
    key_id = conn.execute("SELECT saved_by_key FROM versions WHERE content_id = %s",
                          (created["content_id"],)).fetchone()["saved_by_key"]
    done = subprocess.run([sys.executable, str(ROOT / "bin" / "keys"), "revoke", str(key_id), "--cancel-pending"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={"PATH": "/usr/bin:/bin", "DATABASE_URL": database_url})
    assert done.returncode == 0, done.stderr
    assert "cancelled the unstarted work of 1 versions" in done.stdout
    statuses = {r["status"] for r in conn.execute("SELECT status FROM tasks WHERE content_id = %s",
                                                   (created["content_id"],)).fetchall()}
    assert statuses == {"cancelled"}
    events = conn.execute("SELECT actor FROM events WHERE content_id = %s AND to_status = 'cancelled'",
                          (created["content_id"],)).fetchall()
    assert events and all(e["actor"] == f"bin/keys (revoked key {key_id})" for e in events)
    listed = api.get("/api/attention?problem=revoked", role="admin").json
    assert listed["counts"]["revoked"] == 7 and {i["content_id"] for i in listed["items"]} == {created["content_id"]}
