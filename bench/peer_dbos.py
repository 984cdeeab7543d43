#!/usr/bin/env python3
"""DBOS Transact's side of bench/peers.py, run under .venv-peers (bench/requirements-peers.txt).

Each task is a DBOS workflow doing the durable work a media task of ours does, with the same file writes as
bench/peer_procrastinate.py (receipts/objects.py, write_atomic: temp file, fsync, rename, fsync of the directory), each a
DBOS step, so DBOS checkpoints it in its system tables in PostgreSQL: the intent record; the instant
provider's call with its bytes stored under their sha256 (one step, so the bytes are on disk before the
step's checkpoint commits and the checkpoint holds only the digest); the result record. The workflow's
completion is DBOS's own, in its system tables.

DBOS is used as its documentation sets it up for a queue served by separate worker processes
(https://docs.dbos.dev/python/examples/queue-worker, https://docs.dbos.dev/python/tutorials/queue-tutorial,
https://docs.dbos.dev/python/reference/queues): each worker process configures DBOS with the system
database and an `executor_id` of its own, launches it, then declares the queue with `DBOS.register_queue`
(in DBOS 3.4 a `Queue` is no longer constructed directly: `Queue(...)` raises, `register_queue` stores the
queue's configuration in the system database); the tasks are enqueued from outside the application with
`DBOSClient` (here `enqueue_in_transaction`, BATCH workflows per transaction, as Procrastinate's
`batch_defer`). The queue has a worker concurrency (workflows at once per process), which the queue tutorial
recommends over a global limit and which needs the unique `executor_id` per process; and a polling interval,
the period at which each worker looks for enqueued workflows (1 s by default; "smaller values reduce dequeue
latency at the cost of more database load", DBOSClient.register_queue's docstring): a worker starts at
most its concurrency's worth of workflows per poll, so the interval caps its rate.

    peer_dbos.py schema                          create DBOS's system tables in PEER_DATABASE_URL
    peer_dbos.py worker NAME CONCURRENCY POLL    serve the queue as executor NAME until killed
    peer_dbos.py enqueue N BATCH                 enqueue workflows 0..N-1, BATCH per transaction
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import sqlalchemy as sa  # noqa: E402
from dbos import DBOS, DBOSClient, DBOSConfig, EnqueueOptions  # noqa: E402

from receipts.objects import make_dirs, write_atomic  # noqa: E402

URL = os.environ["PEER_DATABASE_URL"]
WORK = Path(os.environ["PEER_WORK_DIR"])
APP = "peer-bench"
QUEUE = "media"
WORKFLOW = "media"


def instant_answer(job: int) -> bytes:
    """What the instant provider answers: a few hundred bytes unique to the job (as bench/instant_worker.py)."""
    return hashlib.sha256(f"peer asset {job}".encode()).digest() * 12


@DBOS.step()
def record_intent(job: int) -> None:
    write_atomic(WORK / "intents" / f"{job}.json", json.dumps({"job": job, "provider": "instant"}).encode())


@DBOS.step()
def call_provider_and_store(job: int) -> dict:
    data = instant_answer(job)
    sha = hashlib.sha256(data).hexdigest()
    write_atomic(WORK / "media" / sha, data)
    return {"sha256": sha, "size": len(data)}


@DBOS.step()
def record_result(job: int, asset: dict) -> None:
    write_atomic(WORK / "results" / f"{job}.json", json.dumps({"job": job, **asset}).encode())


@DBOS.workflow(name=WORKFLOW)
def media(job: int) -> None:
    record_intent(job)
    record_result(job, call_provider_and_store(job))


def worker(name: str, concurrency: int, poll: float) -> None:
    config: DBOSConfig = {"name": APP, "system_database_url": URL, "executor_id": name,
                          "application_version": "bench"}
    DBOS(config=config)
    DBOS.launch()
    # after launch, as https://docs.dbos.dev/python/examples/queue-worker registers the worker's queue; a worker
    # concurrency, which https://docs.dbos.dev/python/tutorials/queue-tutorial#worker-concurrency recommends
    # over a global one (it needs the executor_id above to be unique per process)
    DBOS.register_queue(QUEUE, worker_concurrency=concurrency, polling_interval_sec=poll)
    # DBOS's queue manager starts the queue's polling thread within a second of the registration; the bench
    # starts its clock once every worker says it is polling
    deadline = time.monotonic() + 30
    while not any(t.name == f"queue-worker-{QUEUE}" and t.is_alive() for t in threading.enumerate()):
        if time.monotonic() > deadline:
            raise SystemExit(f"DBOS did not start polling queue {QUEUE!r}")
        time.sleep(0.05)
    write_atomic(WORK / "ready" / name, b"")
    threading.Event().wait()


def enqueue(total: int, batch: int) -> None:
    client = DBOSClient(system_database_url=URL, application_name=APP)
    engine = sa.create_engine(sa.make_url(URL).set(drivername="postgresql+psycopg"))
    options: EnqueueOptions = {"queue_name": QUEUE, "workflow_name": WORKFLOW}
    try:
        for start in range(0, total, batch):
            with engine.begin() as conn:
                for job in range(start, min(total, start + batch)):
                    client.enqueue_in_transaction(conn, {**options, "workflow_id": f"media-{job}"}, job)
    finally:
        engine.dispose()
        client.destroy()


def main(argv: list[str]) -> int:
    command = argv[0]
    if command == "schema":
        for folder in ("intents", "media", "results", "ready"):
            make_dirs(WORK / folder)
        DBOS.migrate(URL)
    elif command == "worker":
        worker(argv[1], int(argv[2]), float(argv[3]))
    elif command == "enqueue":
        enqueue(int(argv[1]), int(argv[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
