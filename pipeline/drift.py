"""Where Redis and PostgreSQL disagree about what is queued, for /metrics.

PostgreSQL is the truth; Redis holds RQ messages only. Two disagreements are worth a gauge:
a message in Redis (waiting in a queue, or taken by a worker) whose task no longer needs a
worker in PostgreSQL (a harmless duplicate: its claim matches nothing, but many of them mean
superseded or cancelled work left in the queues), and a task that PostgreSQL says was sent and
waits for a worker, with no message in Redis (lost: Redis flushed or restarted empty; the
reconciler sends it again after LOST_DISPATCH_SECONDS). Messages are known by their job id,
`task-<task id>-<outbox id>` (pipeline.dispatch). Reads are bounded by `limit` per queue and
per query; PostgreSQL is read first, so a task claimed meanwhile is not counted as lost.
"""

from __future__ import annotations

import re

import psycopg
import redis
from rq import Queue
from rq.registry import StartedJobRegistry

from pipeline import db
from pipeline.core.lanes import all_queues

JOB_ID = re.compile(r"^task-(\d+)-\d+$")
LIMIT = 10_000


def _tasks_in_redis(conn_redis: redis.Redis, limit: int) -> set[int]:
    """Task ids of the messages waiting in every queue or held by a worker."""
    found: set[int] = set()
    for name in all_queues():
        ids = Queue(name, connection=conn_redis).get_job_ids(0, limit)
        ids += StartedJobRegistry(name, connection=conn_redis).get_job_ids(0, limit - 1, cleanup=False)
        found |= {int(m.group(1)) for m in map(JOB_ID.match, ids) if m}
    return found


def queue_disagreement(conn: psycopg.Connection, conn_redis: redis.Redis, limit: int = LIMIT) -> dict[str, int]:
    """{"redis_only": messages whose task needs no worker, "database_only": sent waiting tasks without a message}.

    Raises redis.RedisError when Redis cannot be read.
    """
    with conn.transaction():
        sent_waiting = {r["id"] for r in db.all(conn, "metrics_sent_waiting_tasks", {"limit": limit})}
    queued = _tasks_in_redis(conn_redis, limit)
    with conn.transaction():
        pending = {r["id"] for r in db.all(conn, "metrics_tasks_needing_a_worker", {"ids": sorted(queued)})}
    return {"redis_only": len(queued - pending), "database_only": len(sent_waiting - queued)}
