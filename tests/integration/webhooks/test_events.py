"""Webhook events are written by the changes that cause them, in their transaction (schema/0028_webhooks.sql): a
version's completion, its approval and withdrawal, a task that needs a person, a budget reached; one message per
event and endpoint of the content's team that wants it, and none for anyone else."""

from __future__ import annotations

import threading

import pytest

from pipeline import keys, webhooks
from pipeline.db import connect
from testkit.helpers import OPERATOR, work_burst
from testkit.webapp import api_and_work

pytestmark = pytest.mark.server_major   # triggers of ours decide every event here

ALLOW = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8"}
URL = "http://127.0.0.1:9/hooks"   # registration resolves it; nothing is sent in these tests


@pytest.fixture
def flow(database_url, redis_url, media_dir, tokens):
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, **ALLOW)
    return api, work


def events(conn, endpoint_id: int | None = None) -> list[tuple]:
    """(type, content, version) of every message, in the order they were written (of one endpoint, or all)."""
    return [(r["type"], r["content_id"], r["version"]) for r in conn.execute(
        "SELECT e.type, e.content_id, e.version FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id "
        "WHERE %(endpoint)s::bigint IS NULL OR d.endpoint_id = %(endpoint)s ORDER BY d.id",
        {"endpoint": endpoint_id}).fetchall()]


def test_a_save_its_approval_and_its_withdrawal_write_completed_deliverable_and_withdrawn_once_each(flow, conn):
    api, work = flow
    # given an endpoint of the key's team that wants every event
    hook = webhooks.add(conn, work.settings, team="default", url=URL, events=None, by=OPERATOR).endpoint
    # when a lesson is made, approved, its approval withdrawn
    created = api.create(2)
    work.until_idle()
    c = created["content_id"]
    assert events(conn) == [("version.completed", c, 1)]
    assert api.approve(created).status_code == 200
    assert api.approve(created).status_code == 200    # approving it again changes nothing: no second event
    withdrawn = api.post(created["status_url"] + "/withdraw", json={"note": "typo"}, role="reviewer")
    assert withdrawn.status_code == 200
    # then one message each, in that order, for that endpoint; nothing is sent yet, all wait as pending
    assert events(conn, hook["id"]) == [("version.completed", c, 1), ("version.deliverable", c, 1),
                                        ("version.withdrawn", c, 1)]
    data = conn.execute("SELECT data FROM webhook_events WHERE type = 'version.withdrawn'").fetchone()["data"]
    assert data == {"reason": "withdrawn", "replaced_by": None, "was_deliverable": True}
    assert {r["status"] for r in conn.execute("SELECT status FROM webhook_deliveries")} == {"pending"}


def test_an_approval_before_the_bundle_is_made_makes_the_version_deliverable_when_the_bundle_succeeds(flow, conn):
    api, work = flow
    webhooks.add(conn, work.settings, team="default", url=URL, events="version.deliverable", by=OPERATOR)
    created = api.create(1)
    # given a version whose media succeeded and whose bundle has not run
    work.send()
    work_burst(work.rt, queues=("image", "tts"))
    assert api.approve(created).status_code == 200
    assert events(conn) == []
    # when the bundle succeeds, then the version is deliverable
    work.until_idle()
    assert events(conn) == [("version.deliverable", created["content_id"], 1)]


def test_approving_a_newer_version_withdraws_the_older_one_as_replaced(flow, conn):
    api, work = flow
    webhooks.add(conn, work.settings, team="default", url=URL, events="version.deliverable,version.withdrawn",
                 by=OPERATOR)
    created = api.create(1)
    work.until_idle()
    assert api.approve(created).status_code == 200
    c = created["content_id"]
    second = api.put(f"/api/contents/{c}", json={**_lesson_v2(), "base_version": 1}, role="editor")
    assert second.status_code == 202, second.json
    work.until_idle()
    assert api.post(f"/api/contents/{c}/versions/2/approve", role="reviewer").status_code == 200
    assert events(conn) == [("version.deliverable", c, 1), ("version.withdrawn", c, 1), ("version.deliverable", c, 2)]
    data = conn.execute("SELECT data FROM webhook_events WHERE type = 'version.withdrawn'").fetchone()["data"]
    assert data["reason"] == "replaced" and data["replaced_by"] == 2


def _lesson_v2() -> dict:
    from testkit.helpers import lesson
    return lesson(1, prefix="第二版")


@pytest.mark.parametrize("first", ["completion", "approval"])
def test_a_completion_and_an_approval_committing_at_once_make_the_version_deliverable_exactly_once(
        flow, conn, database_url, first):
    api, work = flow
    webhooks.add(conn, work.settings, team="default", url=URL, events="version.deliverable", by=OPERATOR)
    created = api.create(1)
    work.send()
    work_burst(work.rt, queues=("image", "tts"))
    c = created["content_id"]
    bundle = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'bundle'", (c,)).fetchone()["id"]
    # the two changes, each in a transaction of its own: the bundle's success as its trigger sees it, and the
    # approval as pipeline.review makes it (contents_approve); the first holds its transaction open while the
    # second runs, then commits
    statements = {
        "completion": ("UPDATE tasks SET status = 'succeeded', asset_sha256 = (SELECT asset_sha256 FROM tasks "
                       "WHERE content_id = %s AND kind = 'image') WHERE id = %s", (c, bundle)),
        "approval": ("UPDATE contents SET approved_version = 1 WHERE id = %s", (c,)),
    }
    second = "approval" if first == "completion" else "completion"
    with connect(database_url) as holder, connect(database_url, autocommit=True) as other:
        holder.execute(*statements[first])
        done = threading.Event()
        runner = threading.Thread(target=lambda: (other.execute(*statements[second]), done.set()), daemon=True)
        runner.start()
        # the second waits for the first (on the version's mark), rather than missing it
        assert not done.wait(0.5)
        holder.commit()
        assert done.wait(10)
        runner.join(10)
    assert events(conn) == [("version.deliverable", c, 1)]


def test_a_failed_task_needs_attention_and_only_its_own_teams_endpoints_hear_of_it(flow, conn, database_url,
                                                                                    redis_url, media_dir):
    api, work = flow
    # given an endpoint of the key's team for task.needs_attention, and one of another team for everything
    keys.create(conn, "ed@beta.example", "editor", team="beta")
    mine = webhooks.add(conn, work.settings, team="default", url=URL, events="task.needs_attention", by=OPERATOR)
    theirs = webhooks.add(conn, work.settings, team="beta", url=URL, events=None, by=OPERATOR)
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]["id"]
    from pipeline.core.errors import Permanent
    work.executor.script[image] = [Permanent("the provider refused this prompt")]
    work.until_idle()
    rows = conn.execute("SELECT e.type, e.task_id, e.data, d.endpoint_id FROM webhook_deliveries d "
                        "JOIN webhook_events e ON e.id = d.event_id").fetchall()
    assert [(r["type"], r["task_id"], r["endpoint_id"]) for r in rows] == [
        ("task.needs_attention", image, mine.endpoint["id"])]
    assert rows[0]["data"] == {"kind": "image", "status": "failed", "reason": "permanent_error", "block": "b1"}
    assert events(conn, theirs.endpoint["id"]) == []


def test_a_budget_reached_is_told_once_per_team_kind_and_day(database_url, redis_url, media_dir, tokens, conn):
    # given image calls that cost 1 against a daily budget of 1.5: the second image call of the day waits
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, IMAGE_COST_PER_CALL="1",
                             IMAGE_DAILY_BUDGET="1.5", **ALLOW)
    webhooks.add(conn, work.settings, team="default", url=URL, events="budget.reached", by=OPERATOR)
    created = api.create(3)
    work.until_idle(rounds=3)
    waiting = conn.execute("SELECT count(*) AS n FROM tasks WHERE waiting_for = 'budget'").fetchone()["n"]
    assert waiting == 2
    # then one event, for the first task that waited
    rows = conn.execute("SELECT type, content_id, data FROM webhook_events").fetchall()
    assert [(r["type"], r["content_id"], r["data"]["kind"]) for r in rows] == [
        ("budget.reached", created["content_id"], "image")]
    assert "budget" in rows[0]["data"]["reason"]
