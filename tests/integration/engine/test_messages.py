"""What a message carries: one task, or up to eight when its queue holds a backlog (pipeline/dispatch.py); the tasks
a message has not started go back to the queue when the queue runs dry, the worker is asked to stop, or a task's
run raises; every task runs once either way. The next task of a message is claimed in the transaction of the
success before it."""

from __future__ import annotations

import pytest
import redis
from rq import Queue

from bin.worker import Worker
from pipeline import dispatch, message, versions
from pipeline.db import connect
from testkit.helpers import EDITOR, draft, task_rows, work_burst

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def image_queue(client: redis.Redis) -> Queue:
    return Queue("image", connection=client, serializer=dispatch.SERIALIZER)


def carried(client: redis.Redis) -> list[tuple[int, ...]]:
    """The task ids of each message waiting in the image queue, in order."""
    return [tuple(job.args) for job in image_queue(client).get_jobs()]


def save_images(conn, cfg, lessons: int, blocks: int) -> list[int]:
    """Image task ids of `lessons` saved lessons, their messages not sent yet."""
    ids = []
    for i in range(lessons):
        saved = versions.save(conn, draft(blocks, prefix=f"l{i}"), cfg, by=EDITOR)
        ids += [r["id"] for r in task_rows(cfg.database_url, saved.content_id) if r["kind"] == "image"]
    return ids


def one_job(client: redis.Redis) -> None:
    """One worker of ours takes one message of the image queue and stops."""
    Worker([image_queue(client)], connection=client).work(burst=True, max_jobs=1, logging_level="WARNING")


def test_a_backlog_goes_out_eight_tasks_a_message_and_every_task_runs_once(conn, cfg, rt, executor):
    client = redis.Redis.from_url(cfg.redis_url)
    images = save_images(conn, cfg, lessons=4, blocks=10)
    listening = Worker([image_queue(client)], connection=client)
    listening.register_birth()      # one worker listens: 40 images are a backlog of ten per worker
    try:
        dispatch.send_due(conn, client)
    finally:
        listening.register_death()
    assert [len(ids) for ids in carried(client)] == [8, 8, 8, 8, 8]
    assert sorted(i for ids in carried(client) for i in ids) == sorted(images)
    work_burst(rt)
    rows = task_rows(cfg.database_url)
    assert {r["status"] for r in rows} == {"succeeded"}
    assert all(r["attempts"] == 1 for r in rows)
    assert sorted(executor.calls) == sorted(r["id"] for r in rows)   # every image, narration and bundle, once


def test_without_a_backlog_each_message_carries_one_task(conn, cfg, rt):
    client = redis.Redis.from_url(cfg.redis_url)
    save_images(conn, cfg, lessons=1, blocks=10)
    listening = [Worker([image_queue(client)], connection=client) for _ in range(3)]
    for worker in listening:
        worker.register_birth()
    try:
        dispatch.send_due(conn, client)   # ten images for three workers: not four messages of two for each
    finally:
        for worker in listening:
            worker.register_death()
    assert [len(ids) for ids in carried(client)] == [1] * 10


def test_a_message_gives_back_the_tasks_it_has_not_started_once_its_queue_runs_dry(conn, cfg, rt, executor):
    client = redis.Redis.from_url(cfg.redis_url)
    a, b, c = save_images(conn, cfg, lessons=1, blocks=3)
    image_queue(client).enqueue(dispatch.JOB_FUNC, a, b, c)
    one_job(client)
    # the queue was empty when the first task ended: the other two went back, a message each, unstarted
    assert executor.calls == [a]
    assert carried(client) == [(b,), (c,)]
    assert {r["id"]: r["status"] for r in task_rows(cfg.database_url) if r["kind"] == "image"} == {
        a: "succeeded", b: "ready", c: "ready"}
    work_burst(rt, ("image",))
    assert sorted(executor.calls) == [a, b, c]


def test_a_message_keeps_its_tasks_while_its_queue_holds_other_messages(conn, cfg, rt, executor):
    client = redis.Redis.from_url(cfg.redis_url)
    a, b, c, d = save_images(conn, cfg, lessons=1, blocks=4)
    image_queue(client).enqueue(dispatch.JOB_FUNC, a, b, c)
    image_queue(client).enqueue(dispatch.JOB_FUNC, d)
    one_job(client)
    assert executor.calls == [a, b, c]
    assert carried(client) == [(d,)]


def test_a_worker_asked_to_stop_gives_back_what_it_has_not_started(conn, cfg, rt, executor):
    client = redis.Redis.from_url(cfg.redis_url)
    a, b, c, d = save_images(conn, cfg, lessons=1, blocks=4)
    image_queue(client).enqueue(dispatch.JOB_FUNC, a, b, c)
    image_queue(client).enqueue(dispatch.JOB_FUNC, d)

    def stop_asked(task, call):  # noqa: ARG001 - the platform's SIGTERM arrives during the first call
        rt.stopping = lambda: True
    executor.script[a] = [stop_asked]
    one_job(client)
    assert executor.calls == [a]
    assert carried(client) == [(d,), (b,), (c,)]
    assert {r["id"]: r["status"] for r in task_rows(cfg.database_url) if r["kind"] == "image"} == {
        a: "succeeded", b: "ready", c: "ready", d: "ready"}   # given back unclaimed, not claimed with a's success


def test_a_task_whose_run_raises_fails_the_job_and_gives_back_the_rest(conn, cfg, rt, executor, monkeypatch):
    client = redis.Redis.from_url(cfg.redis_url)
    a, b, c = save_images(conn, cfg, lessons=1, blocks=3)
    job = image_queue(client).enqueue(dispatch.JOB_FUNC, a, b, c)
    image_queue(client).enqueue(dispatch.JOB_FUNC, 10**12)   # the queue is not dry: only the error gives back

    def broken(*args, **kwargs):
        raise RuntimeError("the log could not be written")
    monkeypatch.setattr("pipeline.message.claim", broken)
    one_job(client)
    assert job.get_status(refresh=True) == "failed"
    assert carried(client)[1:] == [(b,), (c,)]
    assert executor.calls == []


def xmins(cfg, to_status: str) -> dict[int, int]:
    """Per task, the transaction that wrote its event into `to_status` (the event row's xmin)."""
    with connect(cfg.database_url, autocommit=True) as c:
        rows = c.execute("SELECT task_id, xmin::text::bigint AS tx FROM events WHERE to_status = %s",
                         (to_status,)).fetchall()
    return {r["task_id"]: r["tx"] for r in rows}


def test_the_next_task_of_a_message_is_claimed_in_the_commit_of_the_success_before_it(conn, cfg, rt, executor):
    client = redis.Redis.from_url(cfg.redis_url)
    a, b, c, d = save_images(conn, cfg, lessons=1, blocks=4)
    image_queue(client).enqueue(dispatch.JOB_FUNC, a, b, c)
    image_queue(client).enqueue(dispatch.JOB_FUNC, d)   # the queue is not dry: the message keeps its tasks
    one_job(client)
    assert executor.calls == [a, b, c]
    claimed, succeeded = xmins(cfg, "running"), xmins(cfg, "succeeded")
    assert succeeded[a] == claimed[b] and succeeded[b] == claimed[c]   # one commit each, not two
    assert claimed[a] not in (succeeded[a], succeeded[b], succeeded[c])   # the message's first claim stands alone


def test_a_task_claimed_with_a_success_that_found_its_lease_lost_still_runs(conn, cfg, rt, executor):
    a, b, c = save_images(conn, cfg, lessons=1, blocks=3)

    def lease_taken(task, call):  # noqa: ARG001 - the lease expired during the call and was taken by another claim
        with connect(cfg.database_url, autocommit=True) as other:
            other.execute("UPDATE tasks SET lease_token = gen_random_uuid() WHERE id = %s", (task.id,))
    executor.script[a] = [lease_taken]
    assert message.run_task(a, b, c) == "lease_lost succeeded succeeded"
    assert executor.calls == [a, b, c]
    assert {r["id"]: r["status"] for r in task_rows(cfg.database_url) if r["kind"] == "image"} == {
        a: "running", b: "succeeded", c: "succeeded"}
