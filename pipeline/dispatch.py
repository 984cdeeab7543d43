"""The outbox dispatcher: PostgreSQL outbox rows become RQ messages.

Claim due rows (SKIP LOCKED, a claim token, a short claim lease) and commit;
enqueue one RQ job per row carrying only the task id; then mark the rows sent
where the claim token still matches. A crash between enqueue and mark leaves the
rows to be claimed again after the claim lease: a duplicate message, which the
task claim turns into a no-op. Due times live in the outbox, never in RQ.
"""

from __future__ import annotations

import time
import uuid
from typing import Callable, Iterable

import psycopg
import redis
from rq import Queue

from pipeline import db
from pipeline.log import log

JOB_FUNC = "pipeline.jobs.run_task"
QUEUES = ("image", "tts", "bundle")


def enqueue(conn_redis: redis.Redis, rows: Iterable[dict]) -> None:
    """One RQ job per outbox row, in one Redis round trip. RQ's own retry stays off."""
    rows = list(rows)
    if not rows:
        return
    by_queue: dict[str, list[dict]] = {}
    for row in rows:
        by_queue.setdefault(row["queue"], []).append(row)
    with conn_redis.pipeline() as pipe:
        for name, group in by_queue.items():
            Queue(name, connection=conn_redis).enqueue_many([
                Queue.prepare_data(JOB_FUNC, args=(row["task_id"],), job_id=f"task-{row['task_id']}-{row['id']}",
                                   timeout=-1, result_ttl=0, failure_ttl=86_400,
                                   description=f"task {row['task_id']}")
                for row in group], pipeline=pipe)
        pipe.execute()


def _send(conn: psycopg.Connection, conn_redis: redis.Redis, claim_query: str, params: dict,
          claim_seconds: float) -> int:
    token = uuid.uuid4()
    with conn.transaction():
        rows = db.all(conn, claim_query, {**params, "claim_token": token, "claim_seconds": claim_seconds})
    if not rows:
        return 0
    enqueue(conn_redis, rows)
    with conn.transaction():
        sent = db.all(conn, "outbox_mark_sent", {"ids": [r["id"] for r in rows], "claim_token": token})
    for row in rows:
        log("dispatched", task_id=row["task_id"], outbox_id=row["id"], queue=row["queue"],
            rq_job_id=f"task-{row['task_id']}-{row['id']}")
    return len(sent)


def send_due(conn: psycopg.Connection, conn_redis: redis.Redis, *, batch: int = 200,
             claim_seconds: float = 30.0) -> int:
    """Send one batch of due outbox rows; returns how many were marked sent."""
    return _send(conn, conn_redis, "outbox_claim", {"limit": batch}, claim_seconds)


def send_now(conn: psycopg.Connection, conn_redis: redis.Redis, outbox_ids: Iterable[int],
             *, claim_seconds: float = 30.0) -> int:
    """Fast path after a commit: send these rows at once. Redis trouble leaves them for the dispatcher."""
    ids = list(outbox_ids)
    if not ids:
        return 0
    try:
        return _send(conn, conn_redis, "outbox_claim_ids", {"ids": ids}, claim_seconds)
    except redis.RedisError as exc:
        log("fast_path_deferred", outbox_ids=ids, error=exc.__class__.__name__)
        return 0


def run_forever(connect: Callable[[], psycopg.Connection], conn_redis: redis.Redis, *, idle_sleep: float = 0.2,
                claim_seconds: float = 30.0, should_stop: Callable[[], bool] = lambda: False) -> None:
    """The long-running dispatcher: send batches while there are due rows, else nap briefly."""
    conn = None
    while not should_stop():
        try:
            if conn is None or conn.closed or conn.broken:
                conn = connect()
            if send_due(conn, conn_redis, claim_seconds=claim_seconds) == 0:
                time.sleep(idle_sleep)
        except (psycopg.OperationalError, redis.RedisError) as exc:
            log("dispatcher_waiting", error=f"{exc.__class__.__name__}: {exc}"[:300])
            time.sleep(1.0)
