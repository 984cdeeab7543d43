"""Whoever can write to Redis cannot run code on the workers: messages are JSON, and a worker runs only
`pipeline.message.run_task(task_id)`; a planted pickle or a message naming another function is refused unrun."""

from __future__ import annotations

import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import redis
from rq import Callback, Queue, Retry
from rq.job import Job
from rq.registry import FailedJobRegistry, StartedJobRegistry
from rq.serializers import DefaultSerializer
from rq.webhook import Webhook

from bin.worker import Worker
from pipeline import dispatch, versions
from testkit.helpers import EDITOR, draft

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

MARK = "mediapipe_planted_job_ran"


def planted(marker_path: str) -> None:
    """What a planted message would do if it ran: leave a file behind."""
    with open(marker_path, "w") as out:
        out.write(MARK)


def burst(client: redis.Redis, queue: str = "image") -> None:
    Worker([Queue(queue, connection=client)], connection=client).work(burst=True, logging_level="WARNING")


def test_our_messages_are_json_not_pickles(conn, cfg, rt, redis_url):
    client = redis.Redis.from_url(redis_url)
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    dispatch.send_now(conn, client, saved.outbox_ids)
    job_id = Queue("image", connection=client).get_job_ids()[0]
    raw = zlib.decompress(client.hget(f"rq:job:{job_id}", "data"))
    assert not raw.startswith(b"\x80")                      # a pickle's first byte
    assert raw.startswith(b"[") and dispatch.JOB_FUNC.encode() in raw


def test_a_planted_pickle_is_refused_without_running(rt, redis_url, tmp_path, capfd):
    client = redis.Redis.from_url(redis_url)
    marker = tmp_path / "ran"
    # given a pickled job planted in our queue by someone who can write to Redis
    job = Queue("image", connection=client, serializer=DefaultSerializer).enqueue(planted, str(marker))
    assert client.hget(f"rq:job:{job.id}", "data")[:1] in (b"\x80", b"x")   # pickle (zlib-compressed or not)
    # when a worker of ours takes it
    burst(client)
    # then it did not run, the worker lived on, and the message sits in RQ's failed registry saying why
    assert not marker.exists()
    assert job.id in FailedJobRegistry("image", connection=client).get_job_ids()
    assert client.hget(f"rq:job:{job.id}", "status") == b"failed"
    assert '"job_refused"' in capfd.readouterr().err


def test_a_json_message_naming_another_function_is_refused_without_running(rt, redis_url, tmp_path):
    client = redis.Redis.from_url(redis_url)
    marker = tmp_path / "ran"
    queue = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
    job = queue.enqueue(f"{__name__}.planted", str(marker))
    other = queue.enqueue("os.remove", str(tmp_path / "kept"))
    (tmp_path / "kept").write_text("still here")
    burst(client)
    assert not marker.exists() and (tmp_path / "kept").exists()
    assert {job.id, other.id} <= set(FailedJobRegistry("image", connection=client).get_job_ids())


def test_run_task_with_anything_but_one_to_eight_task_ids_is_refused(rt, redis_url):
    client = redis.Redis.from_url(redis_url)
    queue = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
    jobs = [queue.enqueue(dispatch.JOB_FUNC, "1; DROP TABLE tasks"), queue.enqueue(dispatch.JOB_FUNC, *range(1, 10)),
            queue.enqueue(dispatch.JOB_FUNC, 1, True), queue.enqueue(dispatch.JOB_FUNC),
            queue.enqueue(dispatch.JOB_FUNC, task_id=1)]
    burst(client)
    assert {j.id for j in jobs} <= set(FailedJobRegistry("image", connection=client).get_job_ids())


def test_a_message_asking_for_webhooks_is_refused_and_no_request_leaves_the_worker(rt, redis_url, tmp_path):
    # given a listener on 127.0.0.1 that counts every request a worker sends it
    calls = []

    class Listener(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            calls.append(self.path)
            self.send_response(204)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    client = redis.Redis.from_url(redis_url)
    hooks = [Webhook(url, "failed", method="POST"), Webhook(url, "finished")]
    try:
        # and messages planted with RQ 3's webhooks: one naming our job function, a pickle, another function
        ours = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
        jobs = [ours.enqueue(dispatch.JOB_FUNC, 1, webhooks=hooks), ours.enqueue("os.getcwd", webhooks=hooks),
                Queue("image", connection=client, serializer=DefaultSerializer).enqueue(planted, str(tmp_path / "x"),
                                                                                         webhooks=hooks)]
        assert b"webhooks" in client.hkeys(f"rq:job:{jobs[0].id}")
        # when a worker of ours takes them
        burst(client)
        # then each is refused, none is left for RQ's clean-up to fail again, and no request was sent
        assert {j.id for j in jobs} <= set(FailedJobRegistry("image", connection=client).get_job_ids())
        assert ours.intermediate_queue.get_job_ids() == []
        assert calls == []
    finally:
        server.shutdown()
        server.server_close()


CALLED: list[str] = []


def record_call(*args, **kwargs) -> None:
    """What a callback a planted message names would do if a worker called it."""
    CALLED.append(repr(args)[:100])


@pytest.mark.parametrize("asks", ["on_success", "on_failure", "on_stopped", "depends_on", "retry"])
def test_a_message_of_ours_asking_rq_for_anything_more_is_refused_unrun(rt, redis_url, asks):
    # given: a message naming our function and a real task id, with one more thing for RQ to act on
    client = redis.Redis.from_url(redis_url)
    queue = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
    extra = {"on_success": {"on_success": Callback(f"{__name__}.record_call")},
             "on_failure": {"on_failure": Callback(f"{__name__}.record_call")},
             "on_stopped": {"on_stopped": Callback(f"{__name__}.record_call")},
             "depends_on": {"depends_on": queue.enqueue("os.getcwd")},
             "retry": {"retry": Retry(max=3)}}[asks]
    CALLED.clear()
    job = queue.enqueue(dispatch.JOB_FUNC, 1, **extra)
    if asks == "depends_on":   # RQ holds a dependent job back: plant it on the queue itself, as a forger would
        queue.push_job_id(job.id)
    # when: a worker of ours takes it
    burst(client)
    # then: it is refused whole, failed unrun, and no callback ran
    assert job.id in FailedJobRegistry("image", connection=client).get_job_ids()
    assert Job.fetch(job.id, connection=client, serializer=dispatch.SERIALIZER).get_status() == "failed"
    assert len(queue) == 0 and job.id not in queue.get_job_ids()   # nor enqueued again for a retry
    assert CALLED == []


def test_a_callback_planted_in_an_abandoned_job_is_never_called_by_a_workers_clean_up(rt, redis_url):
    # given: a job hash naming a failure callback, planted as abandoned in the started registry (RQ fails such a
    # job when it cleans its registries, and calls its failure callback)
    client = redis.Redis.from_url(redis_url)
    queue = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
    job = queue.enqueue(dispatch.JOB_FUNC, 1, on_failure=Callback(f"{__name__}.record_call"))
    queue.remove(job.id)
    client.zadd(f"rq:wip:{queue.name}", {f"{job.id}:planted": 1})
    client.zadd(StartedJobRegistry("image", connection=client).key, {f"{job.id}:planted": 1})
    CALLED.clear()
    # when: a worker of ours cleans the registries, as its maintenance does
    worker = Worker([Queue("image", connection=client)], connection=client)
    worker.clean_registries()
    StartedJobRegistry("image", connection=client, job_class=worker.job_class,
                       serializer=dispatch.SERIALIZER).cleanup(timestamp=2**31)
    # then: the callback it names was never imported or called
    assert CALLED == []
