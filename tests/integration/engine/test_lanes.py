"""Lanes: interactive work before bulk work, contents taking turns in the bulk lane, and every
message a task ever gets (retry, re-send, unblocked dependent) in its version's lane."""

import dataclasses
import multiprocessing
from datetime import datetime, timezone

import pytest
import redis
from rq import Queue

from bin.worker import Worker
from pipeline import db, dispatch, keys, tasks, review, versions
from pipeline.core import lanes
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, Transient
from pipeline.db import connect
from pipeline.reconcile import Reconciler
from pipeline.runtime import Runtime
from pipeline.tasks import Asset
from testkit.helpers import EDITOR, IMPORTER, claim, draft, make_settings, task_rows, wait_until

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

DEPTH = {"image": 2, "tts": 2, "bundle": 2}


@pytest.fixture
def client(cfg):
    return redis.Redis.from_url(cfg.redis_url)


def send(conn, client, depth=DEPTH) -> int:
    total = 0
    while sent := dispatch.send_due(conn, client, bulk_depth=depth):
        total += sent
    return total


def queued(client, name: str) -> list[int]:
    """Task ids of the messages waiting in one RQ queue, first out first."""
    return [int(job_id.decode().split("-")[1]) for job_id in client.lrange(Queue(name, connection=client).key, 0, -1)]


def content_of(conn, task_id: int) -> int:
    return db.one(conn, "tasks_get", {"task_id": task_id})["content_id"]


def pop(client, name: str) -> int:
    """What a worker does first with a message: take it off the queue (the task id)."""
    return int(client.lpop(Queue(name, connection=client).key).decode().split("-")[1])


def test_the_queues_of_a_kind_are_listened_to_interactive_first():
    assert lanes.worker_queues("image") == ["image", "image-bulk"]
    assert lanes.queue_name("tts", "bulk") == "tts-bulk"
    assert lanes.all_queues()[:4] == ("image", "tts", "video", "bundle")
    with pytest.raises(InvalidInput, match="priority"):
        lanes.parse_priority("urgent")


def test_the_lane_enum_matches_the_database(conn):
    labels = conn.execute("SELECT enum_range(NULL::lane)::text[] AS v").fetchone()["v"]
    assert tuple(labels) == lanes.LANES


def test_a_bulk_save_is_left_to_the_dispatcher_which_sends_it_to_the_bulk_queues(conn, cfg, client):
    saved = versions.save(conn, draft(3), cfg, by=IMPORTER, lane="bulk")
    # no fast path for bulk work: its rows wait for the dispatcher's turns
    assert saved.outbox_ids == () and saved.lane == "bulk"
    rows = conn.execute("SELECT lane FROM outbox").fetchall()
    assert {r["lane"] for r in rows} == {"bulk"} and len(rows) == 6
    assert dispatch.send_now(conn, client, [r["id"] for r in conn.execute("SELECT id FROM outbox")]) == 0
    assert send(conn, client) == 4          # two per kind: the bulk queues' depth
    assert len(queued(client, "image-bulk")) == 2 and len(queued(client, "tts-bulk")) == 2
    assert queued(client, "image") == [] and queued(client, "tts") == []


def test_an_interactive_save_is_sent_at_once_to_the_interactive_queues(conn, cfg, client):
    saved = versions.save(conn, draft(2), cfg, by=EDITOR)
    assert saved.lane == "interactive" and len(saved.outbox_ids) == 4
    assert dispatch.send_now(conn, client, saved.outbox_ids) == 4
    assert len(queued(client, "image")) == 2 and queued(client, "image-bulk") == []


def test_a_save_that_is_sent_at_once_claims_its_messages_as_it_writes_them(conn, database_url, redis_url, tmp_path,
                                                                           client):
    # a claim that outlasts the two saves and the sends below on a loaded machine (0.5 s did not, beside three
    # other passes of the suite), and then runs out while the test waits
    short = make_settings(database_url, redis_url, tmp_path, DISPATCH_CLAIM_SECONDS="5")
    sent = versions.save(conn, draft(2), short, by=EDITOR, send_at_once=True)
    unsent = versions.save(conn, draft(1, prefix="unsent"), short, by=EDITOR, send_at_once=True)
    assert isinstance(sent.outbox_ids, dispatch.ClaimedMessages) and len(sent.outbox_ids) == 4
    # while the saves' claims hold, the dispatcher leaves their rows alone
    assert send(conn, client) == 0
    # the caller sends its rows under the save's own claim: no claim of their own, one attempt each
    assert dispatch.send_now(conn, client, sent.outbox_ids) == 4
    rows = conn.execute("SELECT task_id, send_attempts, sent_at FROM outbox WHERE id = ANY(%s)",
                        (list(sent.outbox_ids),)).fetchall()
    assert all(r["sent_at"] is not None and r["send_attempts"] == 1 for r in rows) and len(rows) == 4
    # a caller that never sent (it died after the commit): the dispatcher sends once the claim has run out
    wait_until(lambda: send(conn, client) == 2, timeout=20)
    assert len(queued(client, "image")) == 3 and len(queued(client, "tts")) == 3
    assert {r["send_attempts"] for r in conn.execute("SELECT send_attempts FROM outbox WHERE id = ANY(%s)",
                                                     (list(unsent.outbox_ids),))} == {2}


def test_a_worker_takes_interactive_work_before_bulk_work_queued_earlier(conn, cfg, client, rt, executor):
    bulk = versions.save(conn, draft(3, prefix="bulk"), cfg, by=IMPORTER, lane="bulk")
    send(conn, client, depth={"image": 10, "tts": 10, "bundle": 10})
    editor = versions.save(conn, draft(2, prefix="editor"), cfg, by=EDITOR)
    dispatch.send_now(conn, client, editor.outbox_ids)
    # a worker of the Procfile's image pool, listening to its queues in their order
    Worker([Queue(q, connection=client) for q in lanes.worker_queues("image")], connection=client).work(
        burst=True, logging_level="WARNING")
    order = [content_of(conn, task_id) for task_id in executor.calls]
    assert order == [editor.content_id] * 2 + [bulk.content_id] * 3


def test_in_the_bulk_lane_contents_take_turns(conn, cfg, client):
    first = versions.save(conn, draft(6, prefix="A"), cfg, by=IMPORTER, lane="bulk")
    second = versions.save(conn, draft(2, prefix="B"), cfg, by=IMPORTER, lane="bulk")
    served = []
    for _ in range(6):
        send(conn, client)
        served.append(content_of(conn, pop(client, "image-bulk")))
    a, b = first.content_id, second.content_id
    assert served == [a, b, a, b, a, a]       # B has two blocks; then A goes on alone
    send(conn, client)
    assert len(queued(client, "image-bulk")) == 2


def test_in_the_bulk_lane_teams_take_turns_whatever_number_of_contents_each_imports(conn, cfg, client):
    for team in ("physics", "chemistry"):
        keys.create(conn, f"importer@{team}.example", "editor", team=team)
    physics, chemistry = (dataclasses.replace(IMPORTER, team=team) for team in ("physics", "chemistry"))
    team_of = {versions.save(conn, draft(4, prefix=f"P{i}"), cfg, by=physics, lane="bulk").content_id: "physics"
               for i in range(3)}
    team_of[versions.save(conn, draft(4, prefix="C"), cfg, by=chemistry, lane="bulk").content_id] = "chemistry"
    served = []
    for _ in range(8):
        send(conn, client)
        served.append(team_of[content_of(conn, pop(client, "image-bulk"))])
    # contents alone taking turns would give chemistry's one import a quarter of the places, and three in a row
    # to physics
    assert served.count("chemistry") == served.count("physics") == 4
    assert all(len(set(served[i:i + 3])) == 2 for i in range(len(served) - 2)), served


def test_a_content_saved_behind_a_big_import_gets_the_next_free_place(conn, cfg, client):
    big = versions.save(conn, draft(20, prefix="big"), cfg, by=IMPORTER, lane="bulk")
    for _ in range(3):
        send(conn, client)
        pop(client, "image-bulk")
    small = versions.save(conn, draft(1, prefix="small"), cfg, by=IMPORTER, lane="bulk")
    send(conn, client)                  # the place the last pop freed
    waiting = [content_of(conn, task_id) for task_id in queued(client, "image-bulk")]
    assert waiting == [big.content_id, small.content_id]   # FIFO would put it behind 16 images


def test_one_dispatcher_at_a_time_fills_the_bulk_queues(conn, cfg, client):
    versions.save(conn, draft(3), cfg, by=IMPORTER, lane="bulk")
    with connect(cfg.database_url, autocommit=True) as other:
        assert db.one(other, "outbox_bulk_try_lock")["locked"]
        assert dispatch.send_bulk(conn, client, depth=DEPTH) == 0    # the other dispatcher is filling them
        db.execute(other, "outbox_bulk_unlock")
    assert dispatch.send_bulk(conn, client, depth=DEPTH) == 4


def test_a_retry_a_resend_and_the_unblocked_bundle_stay_in_the_bulk_lane(conn, cfg, client):
    saved = versions.save(conn, draft(1), cfg, by=IMPORTER, lane="bulk")
    image, speech, bundle = task_rows(cfg.database_url, saved.content_id)
    send(conn, client)
    # a transient failure schedules the retry's message in the version's lane
    task = claim(cfg, image["id"]).task
    tasks.fail_attempt(conn, task, Transient("flaky"), cfg, actor="w", now=datetime.now(timezone.utc))
    assert conn.execute("SELECT lane FROM outbox WHERE task_id = %s AND sent_at IS NULL",
                        (image["id"],)).fetchone()["lane"] == "bulk"
    # a message lost long ago is sent again by the reconciler, in the same lane
    conn.execute("DELETE FROM outbox WHERE task_id = %s AND sent_at IS NULL", (image["id"],))
    conn.execute("UPDATE outbox SET sent_at = now() - interval '1 hour'")
    conn.execute("UPDATE tasks SET available_at = now() - interval '1 hour' WHERE id = %s", (image["id"],))
    Reconciler(cfg, conn, {}).run()
    assert conn.execute("SELECT lane FROM outbox WHERE task_id = %s AND sent_at IS NULL",
                        (image["id"],)).fetchone()["lane"] == "bulk"
    # the bundle, unblocked when the media succeed, is bulk too: the fast path leaves it to the dispatcher
    unblocked = []
    for row in (image, speech):
        conn.execute("DELETE FROM outbox WHERE task_id = %s AND sent_at IS NULL", (row["id"],))
        conn.execute("UPDATE tasks SET status = 'ready', available_at = now() WHERE id = %s", (row["id"],))
        claimed = claim(cfg, row["id"]).task
        ids = tasks.succeed(conn, claimed, Asset("a" * 63 + str(row["id"] % 10), "image/png", 1), actor="w").unblocked
        unblocked += ids
    assert conn.execute("SELECT lane FROM outbox WHERE id = ANY(%s)", (unblocked,)).fetchone()["lane"] == "bulk"
    assert dispatch.send_now(conn, client, unblocked) == 0
    send(conn, client)
    assert queued(client, "bundle-bulk") == [bundle["id"]]


def test_an_editors_retry_of_a_bulk_task_is_interactive_work(conn, cfg, client):
    saved = versions.save(conn, draft(1), cfg, by=IMPORTER, lane="bulk")
    image = task_rows(cfg.database_url, saved.content_id)[0]
    conn.execute("DELETE FROM outbox")
    conn.execute("UPDATE tasks SET status = 'failed', last_error = 'x' WHERE id = %s", (image["id"],))
    reopened = review.retry(conn, image["id"], cfg, by=EDITOR)
    assert dispatch.send_now(conn, client, reopened.outbox_ids) == 1
    assert queued(client, "image") == [image["id"]]


def test_the_lane_is_part_of_the_request_an_idempotency_key_stands_for(conn, cfg):
    first = versions.save(conn, draft(1), cfg, by=IMPORTER, save_key="k-1", lane="bulk")
    again = versions.save(conn, draft(1), cfg, by=IMPORTER, save_key="k-1", lane="bulk")
    assert (again.created, again.content_id, again.lane) == (False, first.content_id, "bulk")
    with pytest.raises(Conflict, match="different request"):
        versions.save(conn, draft(1), cfg, by=IMPORTER, save_key="k-1")


def _backend_pid_in_child(rt: Runtime, out) -> None:
    out.send(rt.conn().execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"])


def test_a_forked_process_opens_its_own_connections_and_leaves_the_parents_alone(cfg, executor):
    rt = Runtime(cfg, executor)
    mine = rt.conn().execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"]
    receive, send_end = multiprocessing.get_context("fork").Pipe(duplex=False)
    child = multiprocessing.get_context("fork").Process(target=_backend_pid_in_child, args=(rt, send_end))
    child.start()
    child.join(20)
    assert child.exitcode == 0 and receive.recv() != mine
    # the parent's session is intact (a child that closed it would have ended it)
    assert rt.conn().execute("SELECT pg_backend_pid() AS pid").fetchone()["pid"] == mine
    rt.close()


def test_a_bulk_save_leaves_the_last_tenth_of_the_pending_limit_to_editors(database_url, redis_url, tmp_path):
    cfg = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="30")   # 27 for bulk saves
    with connect(database_url, autocommit=True) as conn:
        for tag in ("a", "b", "c"):
            versions.save(conn, draft(4, prefix=tag), cfg, by=IMPORTER, lane="bulk")   # 9 tasks each: 27
        with pytest.raises(CapacityExceeded, match="the limit is 27 for bulk saves"):
            versions.save(conn, draft(1, prefix="d"), cfg, by=IMPORTER, lane="bulk")
        versions.save(conn, draft(1, prefix="e"), cfg, by=EDITOR)                      # 30: an editor fits
        assert conn.execute("SELECT count(*) AS n FROM tasks").fetchone()["n"] == 30
