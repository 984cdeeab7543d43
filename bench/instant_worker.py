#!/usr/bin/env python3
"""An RQ worker process for the benchmarks.

`--kind engine` runs the real job (`pipeline.message.run_task`) through the real `ProviderExecutor`
(provider slots and rate in PostgreSQL, fsynced intent and result receipts, the asset stored in the
content-addressed media store, the call ledger), with one change: the providers answer at once,
in process, with a few hundred bytes unique to the request; with `--class simple` (the default) it is the
Procfile's worker class, `bin.worker.Worker`, and with `--class fork` RQ's forking `Worker`. `--kind plain`
is a stock RQ worker of that class (`SimpleWorker` or `Worker`) for the baselines' jobs (bench/jobs.py).

Options for measuring: `--stats FILE` writes how many fsync calls the process made and how long
they took; `--profile FILE` profiles the whole worker with pyinstrument; `--calls-log FILE`
appends the time of every provider call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from providers.base import GenerateRequest, Result, Unsupported  # noqa: E402


class InstantProvider:
    """A provider that answers at once with bytes unique to the request (so every asset is really stored)."""

    honours_idempotency_key = False
    supports_lookup = False

    def __init__(self, kind: str, calls_log: Path | None = None) -> None:
        self.kind = kind
        self.name = f"instant-{kind}"
        self.model = "instant-1"
        self.calls = 0
        self._log = open(calls_log, "a", buffering=1) if calls_log else None

    def generate(self, request: GenerateRequest) -> Result:
        if self._log:
            self._log.write(f"{time.time():.6f} {request.idempotency_key}\n")
        self.calls += 1
        data = (f"{self.kind}:{request.idempotency_key}:".encode() * 6)[:300]
        media_type = "image/png" if self.kind == "image" else "audio/wav"
        return Result(data, media_type, f"instant-{os.getpid()}-{self.calls}", {})

    def lookup(self, idempotency_key: str) -> Unsupported:
        return Unsupported()


def install_engine_runtime(calls_log: Path | None) -> None:
    from pipeline import runtime, settings
    from pipeline.db import connect
    from pipeline.executor import ProviderExecutor
    from receipts.calls import ReceiptBook
    from receipts.media import MediaStore

    cfg = settings.load()
    kept: dict = {}

    def conn():
        # the executor's own kept connection, opened on first use (so a forked work horse opens its own)
        current = kept.get("c")
        if current is None or current.closed or current.broken or kept.get("pid") != os.getpid():
            current = kept["c"] = connect(cfg.database_url, autocommit=True)
            kept["pid"] = os.getpid()
        return current

    providers = {"image": InstantProvider("image", calls_log), "tts": InstantProvider("audio", calls_log)}
    executor = ProviderExecutor(cfg, providers, MediaStore(cfg.media_dir), ReceiptBook(cfg.media_dir), conn)
    runtime.install(runtime.Runtime(cfg, executor))


class FsyncCounter:
    """Counts os.fsync calls of this process and the time spent in them (the receipts and media store use it)."""

    def __init__(self) -> None:
        self.calls = 0
        self.seconds = 0.0
        self._real = os.fsync
        os.fsync = self._fsync

    def _fsync(self, fd: int) -> None:
        start = time.perf_counter()
        try:
            self._real(fd)
        finally:
            self.calls += 1
            self.seconds += time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/instant_worker.py")
    parser.add_argument("--kind", choices=("engine", "plain"), required=True)
    parser.add_argument("--class", dest="worker_class", choices=("simple", "fork"), default="simple")
    parser.add_argument("--name", required=True)
    parser.add_argument("--queues", default="image,tts,bundle")
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--stats", type=Path)
    parser.add_argument("--profile", type=Path)
    parser.add_argument("--calls-log", type=Path)
    args = parser.parse_args(argv)

    import redis
    from rq import Queue, SimpleWorker, Worker

    from pipeline import dispatch

    counter = FsyncCounter() if args.stats else None
    if args.kind == "engine":
        install_engine_runtime(args.calls_log)
    url = os.environ["REDIS_URL"]
    connection = redis.Redis.from_url(url)
    cls = SimpleWorker if args.worker_class == "simple" else Worker
    if args.kind == "engine" and args.worker_class == "simple":
        from bin.worker import Worker as cls   # what the Procfile's pools run
    # our messages are JSON (pipeline.dispatch.SERIALIZER), as bin/worker.py reads them; plain RQ keeps its default
    serializer = {"serializer": dispatch.SERIALIZER} if args.kind == "engine" else {}
    worker = cls([Queue(q, connection=connection, **serializer) for q in args.queues.split(",")],
                 connection=connection, name=args.name, **serializer)
    profiler = None
    if args.profile:
        from pyinstrument import Profiler
        profiler = Profiler(interval=0.0005)
        profiler.start()
    started = time.monotonic()
    worker.work(burst=args.burst, logging_level="WARNING", with_scheduler=False)
    elapsed = time.monotonic() - started
    if profiler is not None:
        profiler.stop()
        from bench.profile_steps import summarise
        args.profile.write_text(json.dumps(summarise(profiler.last_session)))
        args.profile.with_suffix(".txt").write_text(profiler.output_text(unicode=False, color=False,
                                                                        show_all=False))
    if args.stats:
        args.stats.write_text(json.dumps({"fsyncs": counter.calls, "fsync_seconds": counter.seconds,
                                          "work_seconds": elapsed}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
