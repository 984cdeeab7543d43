"""An operator's pause of the bulk lane: nothing of it is claimed or sent while it lasts, the interactive
lane goes on, nothing is lost, and the time it was held does not count against its deadline."""

from datetime import datetime, timezone

import pytest
import redis
from rq import Queue

from bin.worker import Worker
from pipeline import dispatch, pauses, versions
from pipeline.core import lanes
from pipeline.core.errors import Conflict
from pipeline.core.principal import Principal
from pipeline.reconcile import Reconciler
from testkit.helpers import EDITOR, IMPORTER, draft, wait_until

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

DEPTH = {"image": 5, "tts": 5, "bundle": 5}


@pytest.fixture
def client(cfg):
    return redis.Redis.from_url(cfg.redis_url)


def send(conn, client) -> int:
    total = 0
    while sent := dispatch.send_due(conn, client, bulk_depth=DEPTH):
        total += sent
    return total


def queued(client, name: str) -> list[int]:
    return [int(job_id.decode().split("-")[1]) for job_id in client.lrange(Queue(name, connection=client).key, 0, -1)]


def work_images(client) -> None:
    """A worker of the image pool that listens to both lanes, until its queues are empty."""
    Worker([Queue(q, connection=client) for q in lanes.worker_queues("image")], connection=client).work(
        burst=True, logging_level="WARNING")


def image_tasks(conn, content_id: int) -> list[dict]:
    return conn.execute("SELECT id, status::text AS status, attempts, deadline_at FROM tasks "
                        "WHERE content_id = %s AND kind = 'image' ORDER BY id", (content_id,)).fetchall()


def test_while_paused_no_bulk_task_is_claimed_or_sent_the_editors_work_runs_and_the_resume_loses_nothing(
        conn, cfg, client, rt, executor):
    bulk = versions.save(conn, draft(2, prefix="import"), cfg, by=IMPORTER, lane="bulk")
    assert send(conn, client) == 4                      # its images and speech are in the bulk queues
    pauses.pause(conn, by=Principal.without_key("ops@example.com", role="admin"))
    editor = versions.save(conn, draft(1, prefix="editor"), cfg, by=EDITOR)
    dispatch.send_now(conn, client, editor.outbox_ids)

    work_images(client)
    # the editor's image ran; the bulk messages already in Redis claimed nothing and cost no call
    assert executor.calls == [t["id"] for t in image_tasks(conn, editor.content_id)]
    held = image_tasks(conn, bulk.content_id)
    assert [(t["status"], t["attempts"]) for t in held] == [("ready", 0), ("ready", 0)]
    # each got a message held in the outbox, which the dispatcher does not send while the lane is paused
    pending = conn.execute("SELECT task_id FROM outbox WHERE sent_at IS NULL AND lane = 'bulk' AND queue = 'image' "
                           "ORDER BY task_id").fetchall()
    assert [r["task_id"] for r in pending] == [t["id"] for t in held]
    assert send(conn, client) == 0 and queued(client, "image-bulk") == []
    # a bulk save is still accepted while paused, and waits
    later = versions.save(conn, draft(1, prefix="later"), cfg, by=IMPORTER, lane="bulk")
    assert send(conn, client) == 0
    assert pauses.state(conn) | {"paused_at": None} == {"lane": "bulk", "paused": True, "paused_at": None,
                                                         "paused_by": "ops@example.com", "waiting": 8}

    resumed = pauses.resume(conn, by=Principal.without_key("ops@example.com", role="admin"))
    assert resumed["tasks_moved"] == 8   # 2 + 1 images, as many narrations, 2 bundles
    send(conn, client)
    assert sorted(queued(client, "image-bulk")) == sorted(
        [t["id"] for t in held] + [t["id"] for t in image_tasks(conn, later.content_id)])
    work_images(client)
    assert {t["status"] for t in image_tasks(conn, bulk.content_id) + image_tasks(conn, later.content_id)} == {
        "succeeded"}
    assert sorted(executor.calls) == sorted(set(executor.calls))   # nothing ran twice


def test_a_paused_task_does_not_fail_for_its_deadline_and_the_resume_gives_it_back_the_time_it_was_held(
        conn, cfg):
    bulk = versions.save(conn, draft(1, prefix="import"), cfg, by=IMPORTER, lane="bulk")
    pause = pauses.pause(conn, by=Principal.without_key("ops@example.com", role="admin"))
    # the import had two seconds left when it was paused
    conn.execute("UPDATE tasks SET deadline_at = %s::timestamptz + interval '2 seconds' WHERE content_id = %s",
                 (pause["paused_at"], bulk.content_id))
    conn.execute("UPDATE versions SET deadline_at = %s::timestamptz + interval '2 seconds' WHERE content_id = %s",
                 (pause["paused_at"], bulk.content_id))
    wait_until(lambda: datetime.now(timezone.utc) > image_tasks(conn, bulk.content_id)[0]["deadline_at"],
               timeout=10, message="the deadline passing")
    Reconciler(cfg, conn, {}).run()
    assert {t["status"] for t in image_tasks(conn, bulk.content_id)} == {"ready"}   # not failed while paused

    resumed = pauses.resume(conn, by=Principal.without_key("ops@example.com", role="admin"))
    deadlines = {t["deadline_at"] for t in image_tasks(conn, bulk.content_id)}
    # exactly two seconds left again, measured from the resume
    assert [(d - resumed["resumed_at"]).total_seconds() for d in deadlines] == [2.0]
    version = conn.execute("SELECT deadline_at FROM versions WHERE content_id = %s", (bulk.content_id,)).fetchone()
    assert (version["deadline_at"] - resumed["resumed_at"]).total_seconds() == 2.0


def test_pause_and_resume_refuse_what_does_not_apply_and_keep_every_pause(conn):
    with pytest.raises(Conflict, match="not paused"):
        pauses.resume(conn, by=Principal.without_key("ops", role="admin"))
    pauses.pause(conn, by=Principal.without_key("ops", role="admin"))
    with pytest.raises(Conflict, match="paused already"):
        pauses.pause(conn, by=Principal.without_key("someone", role="admin"))
    pauses.resume(conn, by=Principal.without_key("ops", role="admin"))
    pauses.pause(conn, by=Principal.without_key("ops-2", role="admin"))
    rows = conn.execute("SELECT paused_by, resumed_by FROM lane_pauses ORDER BY id").fetchall()
    assert [(r["paused_by"], r["resumed_by"]) for r in rows] == [("ops", "ops"), ("ops-2", None)]
