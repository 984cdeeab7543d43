#!/usr/bin/env python3
"""Engine overhead: our tasks per second next to plain RQ no-op jobs per second, in one run.

Ours: lessons of BLOCKS blocks are saved (versions.save + the fast-path send_now, as the web
process does) while the workers wait; timed from the first save to the last task succeeded.
The provider answers at once in process (bench/instant_worker.py), but everything else is the
production path: claim, lease, provider slot and rate rows, fsynced intent and result receipts,
the asset in the media store, the call ledger, the fenced completion, the bundle task.
Plain RQ: the same number of jobs, enqueued in the same batches and queues, doing nothing, drained
by the same worker class and count. Each run starts on a fresh database and an empty Redis; ours
and the baseline alternate their order from one repeat to the next.

`--tasks` is the number of tasks per configuration (worker class and count), spread over
`--repeats` interleaved runs of whole lessons; each figure is the median of those runs. The forking
worker is about ten times slower, so it gets its own, smaller `--fork-tasks`.

    .venv/bin/python bench/engine_overhead.py [--tasks 2000] [--fork-tasks 240] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass
from datetime import timezone
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (BENCH, Stack, draft, quiet_logs, run_main, servers, tasks_per_lesson,  # noqa: E402
                    wait_all_done, wait_workers_idle, worker_argv)
from bench.report import median, print_machine, say, table  # noqa: E402
from bench.measure import CORES, CpuSnapshot, print_limits, redis_calls, settle_pg_stats  # noqa: E402


STALL_SECONDS = 15.0


class LostMessage(RuntimeError):
    """A run stalled: a task's message was consumed without a claim (see docs/performance.md)."""


@dataclass
class Run:
    who: str              # "ours" or "plain RQ"
    cls: str
    workers: int
    items: int
    seconds: float
    cpu: CpuSnapshot
    pg: dict[str, float]
    redis_calls: int

    @property
    def rate(self) -> float:
        return self.items / self.seconds

    def per_item(self, value: float) -> float:
        return value / self.items


COST_COLUMNS = ["CPU workers", "CPU postgres", "CPU redis", "CPU driver", "CPU total", "PG commits",
                "PG write tx (xids)", "WAL fsyncs"]


def cost_medians(group: list[Run]) -> list[float]:
    """The medians over repeats of each COST_COLUMNS figure per item: CPU in ms, counters as counts."""
    cpu = [median(r.per_item(getattr(r.cpu, part)) * 1000 for r in group)
           for part in ("workers", "postgres", "redis", "driver", "total")]
    return cpu + [median(r.per_item(r.pg[counter]) for r in group) for counter in ("commits", "next_xid", "wal_fsyncs")]


def _start_workers(stack: Stack, kind: str, cls: str, count: int, tag: str) -> list:
    names = [f"{tag}-{i}" for i in range(count)]
    procs = [stack.spawn(name, worker_argv(kind, cls, name)) for name in names]
    wait_workers_idle(stack.redis(), names)
    return procs


def _finish(stack: Stack, procs: list, before_cpu: CpuSnapshot, before_pg: dict, before_redis: int, who: str,
            cls: str, items: int, seconds: float) -> Run:
    cpu = CpuSnapshot.take(stack, procs) - before_cpu
    calls = redis_calls(stack.redis()) - before_redis
    for proc in procs:
        stack.stop(proc)
    after_pg = settle_pg_stats(stack)
    return Run(who, cls, len(procs), items, seconds, cpu, {k: after_pg[k] - before_pg[k] for k in after_pg}, calls)


def run_ours(stack: Stack, cls: str, workers: int, tasks: int, blocks: int, tag: str,
             at_start: Callable[[], None] = lambda: None, at_end: Callable[[], None] = lambda: None) -> Run:
    """`at_start` runs once the database, Redis and the workers are ready, right before the measured window;
    `at_end` right after the last task succeeded, before the window's CPU is read."""
    from pipeline import dispatch, versions
    stack.use_database(f"ours_{tag}")
    stack.redis().flushdb()
    cfg = stack.settings()
    procs = _start_workers(stack, "engine", cls, workers, tag)
    lessons = max(1, round(tasks / tasks_per_lesson(blocks)))
    drafts = [draft(blocks, f"{tag}-{i}") for i in range(lessons)]
    conn_redis = stack.redis()
    at_start()
    before_pg = settle_pg_stats(stack, wait=0)
    before_redis = redis_calls(conn_redis)
    before_cpu = CpuSnapshot.take(stack, procs)
    with stack.db() as conn, quiet_logs(stack.logs / "driver.log"):
        started = time.time()
        for d in drafts:
            saved = versions.save(conn, d, cfg, by=BENCH, send_at_once=True)
            dispatch.send_now(conn, conn_redis, saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
        total = lessons * tasks_per_lesson(blocks)

        def stalled(row: dict) -> None:
            for proc in procs:
                stack.stop(proc)
            raise LostMessage(f"{total - row['done']} tasks still waiting after {STALL_SECONDS:.0f} s without "
                              "progress")
        row = wait_all_done(conn, "SELECT count(*) FILTER (WHERE status = 'succeeded') AS done, "
                                  "count(*) FILTER (WHERE status NOT IN ('ready', 'running', 'succeeded')) AS bad, "
                                  "max(updated_at) AS last FROM tasks", total, "tasks", stack.logs,
                            stall_seconds=STALL_SECONDS, on_stall=stalled)
    seconds = row["last"].timestamp() - started
    at_end()
    return _finish(stack, procs, before_cpu, before_pg, before_redis, "ours", cls, total, seconds)


def run_plain(stack: Stack, cls: str, workers: int, jobs: int, blocks: int, tag: str) -> Run:
    from rq import Queue
    from rq.job import Job
    from rq.registry import FinishedJobRegistry
    conn_redis = stack.redis()
    conn_redis.flushdb()
    procs = _start_workers(stack, "plain", cls, workers, tag)
    per_batch = tasks_per_lesson(blocks)
    batches = max(1, round(jobs / per_batch))
    queues = {name: Queue(name, connection=conn_redis) for name in ("image", "tts", "bundle")}
    layout = ["image", "tts"] * blocks + ["bundle"]   # the same queues and proportions as a lesson's tasks
    before_pg = settle_pg_stats(stack, wait=0)
    before_redis = redis_calls(conn_redis)
    before_cpu = CpuSnapshot.take(stack, procs)
    ids: list[str] = []
    started = time.time()
    for _ in range(batches):
        with conn_redis.pipeline() as pipe:
            for name in ("image", "tts", "bundle"):
                data = [Queue.prepare_data("bench.jobs.noop") for q in layout if q == name]
                ids += [job.id for job in queues[name].enqueue_many(data, pipeline=pipe)]
            pipe.execute()
    total = batches * per_batch
    registries = [FinishedJobRegistry(name, connection=conn_redis) for name in queues]
    while sum(r.count for r in registries) < total:
        time.sleep(0.1)
    ended = [job.ended_at for job in Job.fetch_many(ids, connection=conn_redis) if job and job.ended_at]
    last = max(e if e.tzinfo else e.replace(tzinfo=timezone.utc) for e in ended)
    return _finish(stack, procs, before_cpu, before_pg, before_redis, "plain RQ", cls, total,
                   last.timestamp() - started)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=2000,
                        help="tasks (and no-op jobs) per SimpleWorker configuration, over all repeats")
    parser.add_argument("--fork-tasks", type=int, default=240,
                        help="the same for the forking Worker (0 skips it)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=20, help="blocks per lesson (2 tasks each, plus a bundle)")
    parser.add_argument("--workers", default="1,2")
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]
    per_lesson = tasks_per_lesson(args.blocks)
    per_run = lambda total: max(1, math.ceil(total / args.repeats / per_lesson)) * per_lesson  # noqa: E731
    classes = [("simple", per_run(args.tasks))] + ([("fork", per_run(args.fork_tasks))] if args.fork_tasks else [])
    runs: list[Run] = []
    lost = 0
    with servers() as stack:
        print_machine(stack)
        limits = print_limits(stack)
        for rep in range(args.repeats):
            for cls, n in classes:
                for workers in counts:
                    tag = f"r{rep}-{cls}-{workers}"
                    pair = [lambda: run_ours(stack, cls, workers, n, args.blocks, tag),
                            lambda: run_plain(stack, cls, workers, n, args.blocks, tag)]
                    for make in (pair if rep % 2 == 0 else pair[::-1]):
                        run, stalled = _measure(make, f"repeat {rep + 1}:")
                        runs.append(run)
                        lost += stalled
        report(runs, counts, classes, limits)
        if lost:
            say(f"\n{lost} run(s) of ours stalled on a lost message and were run again (not counted above).")
    return 0


def _measure(make, label: str) -> tuple[Run, int]:
    """One run; a run that stalled on a lost message is repeated (at most twice) and counted."""
    for stalled in range(3):
        try:
            run = make()
        except LostMessage as exc:
            say(f"  {label} ours: {exc}; run again")
            continue
        say(f"  {label} {run.who:<8} {run.cls:<6} x{run.workers}: {run.items} in {run.seconds:.2f} s = "
            f"{run.rate:.1f}/s")
        return run, stalled
    raise RuntimeError("three runs in a row lost a message")


def report(runs: list[Run], counts: list[int], classes: list, limits: dict) -> None:
    def pick(who, cls, workers):
        return [r for r in runs if (r.who, r.cls, r.workers) == (who, cls, workers)]

    rows, cost_rows = [], []
    for cls, n in classes:
        for workers in counts:
            ours, plain = pick("ours", cls, workers), pick("plain RQ", cls, workers)
            ratios = [o.rate / p.rate for o, p in zip(ours, plain)]
            name = "SimpleWorker" if cls == "simple" else "Worker (fork per job)"
            rows.append([name, workers, f"{len(ours)} x {ours[0].items}", median(o.rate for o in ours), median(p.rate for p in plain),
                         f"{median(ratios) * 100:.0f} %", " / ".join(f"{x * 100:.0f}" for x in ratios)])
            for group in (ours, plain):
                cost_rows.append([name, workers, group[0].who, *cost_medians(group),
                                  median(r.per_item(r.redis_calls) for r in group)])
    say()
    say("Throughput, median of repeats (ratio = ours / plain RQ, per repeat then median):")
    say(table(["worker class", "workers", "runs x tasks", "ours tasks/s", "plain RQ no-op jobs/s", "ratio",
               "ratio per repeat (%)"], rows))
    say()
    say("Cost per task (ours) or per job (plain RQ), medians; CPU in ms; PostgreSQL and Redis counters are "
        "server-wide deltas over the run (saves, fast-path enqueue and completion polling included):")
    say(table(["worker class", "workers", "who", *COST_COLUMNS, "Redis commands"], cost_rows, digits=2))
    simple_ours = [r for r in runs if r.who == "ours" and r.cls == "simple"]
    if simple_ours:
        writes = median(r.per_item(r.pg["next_xid"]) for r in simple_ours)
        cpu = median(r.per_item(r.cpu.total) for r in simple_ours)
        say()
        say(table(["ceiling for ours (same run)", "tasks/s"], [
            [f"PostgreSQL: {limits['commits_1']:,.0f} commits/s (1 conn) / {writes:.2f} write tx per task",
             limits["commits_1"] / writes],
            [f"PostgreSQL: {limits['commits_4']:,.0f} commits/s (4 conns) / {writes:.2f} write tx per task",
             limits["commits_4"] / writes],
            [f"durable files: {limits['file_writes']:,.0f} writes/s / 3 per media task (one process)",
             limits["file_writes"] / 3],
            [f"CPU: {CORES} cores / {cpu * 1000:.1f} ms CPU per task (all processes)", CORES / cpu],
        ]))


if __name__ == "__main__":
    run_main(main)
