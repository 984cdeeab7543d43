"""RQ's own time limit is the backstop behind the attempt ceiling: a job stuck anywhere ends."""

import time

import redis
from rq import Queue
from rq.job import Job, JobStatus

from bin.worker import Worker
from pipeline import jobs, runtime
from testkit.helpers import ControlledExecutor, make_settings


def test_the_job_limit_is_twice_the_ceiling_and_at_most_a_minute_more(database_url, redis_url, tmp_path):
    short = make_settings(database_url, redis_url, tmp_path, ATTEMPT_CEILING_SECONDS="1.5")
    assert jobs.job_timeout(short) == 3
    assert jobs.job_timeout(make_settings(database_url, redis_url, tmp_path)) == 240 + 60


def test_a_job_enqueued_without_a_limit_is_stopped_past_the_workers_attempt_ceiling(database_url, redis_url,
                                                                                      tmp_path):
    cfg = make_settings(database_url, redis_url, tmp_path / "media", ATTEMPT_CEILING_SECONDS="1")
    runtime.install(runtime.Runtime(cfg, ControlledExecutor(None), worker_id="stuck-worker"))
    try:
        conn = redis.Redis.from_url(redis_url)
        queue = Queue("stuck-jobs", connection=conn)
        # as the dispatcher enqueues: no RQ limit of its own
        job = queue.enqueue("time.sleep", 60, job_timeout=-1, failure_ttl=600)
        started = time.monotonic()
        Worker([queue], connection=conn).work(burst=True, logging_level="WARNING")
        took = time.monotonic() - started
    finally:
        runtime.install(None)
    job = Job.fetch(job.id, connection=conn)
    assert job.get_status() == JobStatus.FAILED
    assert "JobTimeoutException" in (job.latest_result().exc_string or "")
    assert took < 30   # the sleep asked for 60 s; the limit is 2 s
