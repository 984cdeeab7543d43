#!/usr/bin/env python3
"""Procrastinate's side of bench/peers.py, run under .venv-peers (bench/requirements-peers.txt).

Each job does the durable work a media task of ours does, with the same file writes (receipts/objects.py, write_atomic:
temp file, fsync, rename, fsync of the directory): an intent record, the instant provider's bytes (unique
to the job) stored under their sha256, a result record; the job's completion is Procrastinate's own, in
PostgreSQL. Procrastinate is used as its documentation sets it up: `App(connector=PsycopgConnector(...))`,
workers started with its command line (`procrastinate --app bench.peer_procrastinate.app worker --queues media
--concurrency 1`), jobs deferred with `Task.batch_defer`
(https://procrastinate.readthedocs.io/en/stable/howto/basics/worker.html, .../howto/basics/defer.html).

    peer_procrastinate.py schema            apply Procrastinate's schema to PEER_DATABASE_URL
    peer_procrastinate.py defer N BATCH     defer jobs 0..N-1, BATCH per statement
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import procrastinate  # noqa: E402

from receipts.objects import make_dirs, write_atomic  # noqa: E402

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=os.environ["PEER_DATABASE_URL"]))
WORK = Path(os.environ["PEER_WORK_DIR"])


def instant_answer(job: int) -> bytes:
    """What the instant provider answers: a few hundred bytes unique to the job (as bench/instant_worker.py)."""
    return hashlib.sha256(f"peer asset {job}".encode()).digest() * 12


@app.task(name="media", queue="media")
def media(job: int) -> None:
    write_atomic(WORK / "intents" / f"{job}.json", json.dumps({"job": job, "provider": "instant"}).encode())
    data = instant_answer(job)
    sha = hashlib.sha256(data).hexdigest()
    write_atomic(WORK / "media" / sha, data)
    write_atomic(WORK / "results" / f"{job}.json", json.dumps({"job": job, "sha256": sha, "size": len(data)}).encode())


def main(argv: list[str]) -> int:
    command = argv[0]
    if command == "schema":
        for folder in ("intents", "media", "results"):
            make_dirs(WORK / folder)
        with app.open():
            app.schema_manager.apply_schema()
    elif command == "defer":
        total, batch = int(argv[1]), int(argv[2])
        with app.open():
            for start in range(0, total, batch):
                media.batch_defer(*({"job": job} for job in range(start, min(total, start + batch))))
    else:
        raise SystemExit(f"unknown command {command!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
