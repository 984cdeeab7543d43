"""RQ's own time limit is the backstop behind the attempt ceiling: a job stuck anywhere ends."""

import time

import pytest
import redis
from rq import Queue
from rq.job import Job, JobStatus

from bin.worker import Worker
from pipeline import attempt, dispatch, runtime, versions
from pipeline.db import connect
from receipts.media import MediaStore
from testkit.helpers import EDITOR, ControlledExecutor, draft, make_settings

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def test_the_job_limit_is_twice_the_ceiling_and_at_most_a_minute_more(database_url, redis_url, tmp_path):
    short = make_settings(database_url, redis_url, tmp_path, ATTEMPT_CEILING_SECONDS="1.5")
    assert attempt.job_timeout(short) == 3
    assert attempt.job_timeout(make_settings(database_url, redis_url, tmp_path)) == 240 + 60


def test_a_job_enqueued_without_a_limit_is_stopped_past_the_workers_attempt_ceiling(database_url, redis_url,
                                                                                      tmp_path):
    cfg = make_settings(database_url, redis_url, tmp_path / "media", ATTEMPT_CEILING_SECONDS="1")
    executor = ControlledExecutor(MediaStore(cfg.media_dir))
    runtime.install(runtime.Runtime(cfg, executor, worker_id="stuck-worker"))
    try:
        conn = redis.Redis.from_url(redis_url)
        with connect(database_url, autocommit=True) as db_conn:
            saved = versions.save(db_conn, draft(1), cfg, by=EDITOR)
            image = db_conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image'",
                                    (saved.content_id,)).fetchone()["id"]
            # a job stuck where the attempt's own ceiling cannot reach it (it never looks at its attempt)
            executor.script[image] = [lambda task, ctx: time.sleep(60)]
            # as the dispatcher enqueues: no RQ limit of its own
            dispatch.send_now(db_conn, conn, saved.outbox_ids)
        queue = Queue("image", connection=conn)
        job_id = next(j for j in queue.get_job_ids() if j.startswith(f"task-{image}-"))
        started = time.monotonic()
        Worker([queue], connection=conn).work(burst=True, logging_level="WARNING")
        took = time.monotonic() - started
    finally:
        runtime.install(None)
    job = Job.fetch(job_id, connection=conn, serializer=dispatch.SERIALIZER)
    with connect(database_url, autocommit=True) as db_conn:
        task = db_conn.execute("SELECT status, last_error FROM tasks WHERE id = %s", (image,)).fetchone()
    # RQ's limit interrupted the stuck call; the attempt ends as a call whose outcome is not known
    assert took < 30   # the stuck call would take 60 s; the limit is 2 s
    assert task["status"] == "unknown" and "JobTimeoutException" in task["last_error"]
    assert job.get_status() == JobStatus.FINISHED
