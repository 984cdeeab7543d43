"""RQ's bookkeeping of a worker in Redis (its heartbeat, its state, the `rq suspend` flag) is written and read at
most once a second by our workers (bin.worker.SparseBookkeeping), not around every job, and still kept."""

from __future__ import annotations

import time

import pytest
import redis
from rq import Queue, SimpleWorker
from rq.worker import WorkerStatus

from bin.worker import Worker
from pipeline import dispatch

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

MISSING = 10**12   # task ids no database holds: run_task claims nothing and returns "skipped"


def commands_per_job(client: redis.Redis, worker_class, jobs: int) -> float:
    queue = Queue("image", connection=client, serializer=dispatch.SERIALIZER)
    for i in range(jobs):
        queue.enqueue(dispatch.JOB_FUNC, MISSING + i)
    client.config_resetstat()
    worker_class([queue], connection=client, serializer=dispatch.SERIALIZER).work(burst=True, logging_level="WARNING")
    calls = sum(stat["calls"] for stat in client.info("commandstats").values())
    assert queue.count == 0
    return calls / jobs


def test_our_worker_sends_fewer_redis_commands_per_job_than_rqs_simple_worker(rt, redis_url):
    client = redis.Redis.from_url(redis_url)
    stock = commands_per_job(client, SimpleWorker, 30)
    ours = commands_per_job(client, Worker, 30)
    # RQ's SimpleWorker writes the worker heartbeat three times (HSET and EXPIRE each), the state `idle` twice
    # and reads the suspension flag once per job: 9 commands a job that ours sends about once a second
    assert ours <= stock - 8, (stock, ours)


def test_the_heartbeat_is_written_again_once_a_second_has_passed(rt, redis_url):
    client = redis.Redis.from_url(redis_url)
    worker = Worker([Queue("image", connection=client)], connection=client)
    worker.register_birth()
    try:
        worker.bookkeeping_seconds = 0.3
        worker.heartbeat()
        beaten = time.monotonic()
        assert client.ttl(worker.key) > 0
        client.hset(worker.key, "last_heartbeat", "marked")
        worker.heartbeat()                 # within the interval: nothing written
        assert client.hget(worker.key, "last_heartbeat") == b"marked"
        deadline = time.monotonic() + 5
        while client.hget(worker.key, "last_heartbeat") == b"marked":
            assert time.monotonic() < deadline, "the heartbeat was never written again"
            worker.heartbeat()
            time.sleep(0.05)
        assert time.monotonic() - beaten >= 0.3   # not before the interval had passed
    finally:
        worker.register_death()


def test_the_state_is_written_when_it_changes_only(rt, redis_url):
    client = redis.Redis.from_url(redis_url)
    worker = Worker([Queue("image", connection=client)], connection=client)
    worker.register_birth()
    try:
        worker.set_state(WorkerStatus.IDLE)
        assert client.hget(worker.key, "state") == b"idle"
        client.hset(worker.key, "state", "marked")
        worker.set_state(WorkerStatus.IDLE)          # unchanged: not written again
        assert client.hget(worker.key, "state") == b"marked"
        worker.set_state(WorkerStatus.BUSY)
        assert client.hget(worker.key, "state") == b"busy"
    finally:
        worker.register_death()
