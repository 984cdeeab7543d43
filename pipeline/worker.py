"""`python -m pipeline.worker QUEUE [--burst]`: an RQ worker for one queue.

We run RQ's SimpleWorker: the job runs in the worker process itself, so the
kept PostgreSQL connections and the provider sessions survive between jobs
(a fork per job would open a new connection each time). Isolation comes from the
lease: a worker that hangs or dies loses its lease and the reconciler recovers
the task; hard timeouts are the provider timeouts, not a killed work horse.
"""

from __future__ import annotations

import argparse
import sys

import redis
from rq import Queue, SimpleWorker

from pipeline import runtime
from pipeline.dispatch import QUEUES


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipeline.worker")
    parser.add_argument("queue", choices=QUEUES)
    parser.add_argument("--burst", action="store_true", help="exit when the queue is empty")
    args = parser.parse_args(argv)
    rt = runtime.current()
    connection = redis.Redis.from_url(rt.settings.redis_url)
    worker = SimpleWorker([Queue(args.queue, connection=connection)], connection=connection,
                          name=f"{args.queue}-{rt.worker_id}".replace(":", "-"))
    worker.work(burst=args.burst, logging_level="WARNING", with_scheduler=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
