#!/usr/bin/env python3
"""Per-task cost breakdown: what one task costs in PostgreSQL statements, transactions, WAL and file
fsyncs, Redis commands and CPU, and where one worker's wall time goes.

Queues are filled first (lessons saved with the fast path), then one burst SimpleWorker drains
them (bench/instant_worker.py: the real job and executor, an instant in-process provider), next
to one burst SimpleWorker draining the same number of plain-RQ no-op jobs. A second engine run
is profiled with pyinstrument (if installed) and folded into the steps of a task. With
`--strace` (and strace installed) a third run counts fsync/fdatasync system calls of the worker
and of PostgreSQL, as a cross-check of the counters.

    .venv/bin/python bench/task_costs.py [--tasks 1000] [--no-profile] [--strace] [--call-tree FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (BENCH, ROOT, Stack, draft, quiet_logs, run_main, servers, tasks_per_lesson,  # noqa: E402
                    worker_argv)
from bench.report import print_machine, say, table  # noqa: E402
from bench.measure import print_limits, redis_calls, settle_pg_stats, statement_rows, tree_cpu  # noqa: E402

def statements(stack: Stack) -> dict[str, tuple[int, float]]:
    """pg_stat_statements of the bench database: name -> (calls, total ms)."""
    found: dict[str, tuple[int, float]] = {}
    with stack.db() as conn:
        rows = statement_rows(conn, stack.dbname)
    for row in rows:
        name = row["name"] or row["text"][:40]
        calls, ms = found.get(name, (0, 0.0))
        found[name] = (calls + row["calls"], ms + row["exec_ms"])
    return found


def reset_statements(stack: Stack) -> None:
    with stack.db() as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def fill(stack: Stack, tasks: int, blocks: int, tag: str) -> int:
    """Save lessons (fast path) until `tasks` tasks are queued or waiting; returns the number of tasks."""
    from pipeline import dispatch, versions
    cfg = stack.settings()
    lessons = max(1, round(tasks / tasks_per_lesson(blocks)))
    with stack.db() as conn, quiet_logs(stack.logs / "driver.log"):
        for i in range(lessons):
            saved = versions.save(conn, draft(blocks, f"{tag}-{i}"), cfg, by=BENCH, send_at_once=True)
            dispatch.send_now(conn, stack.redis(), saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
    return lessons * tasks_per_lesson(blocks)


def fill_noop(stack: Stack, jobs: int) -> None:
    from rq import Queue
    conn_redis = stack.redis()
    queue = Queue("image", connection=conn_redis)
    with conn_redis.pipeline() as pipe:
        queue.enqueue_many([Queue.prepare_data("bench.jobs.noop") for _ in range(jobs)], pipeline=pipe)
        pipe.execute()


def burst(stack: Stack, kind: str, name: str, extra: list[str] = (), prefix: list[str] = ()) -> dict:
    """Run one burst SimpleWorker to the end; its wall time, CPU (worker, PostgreSQL, Redis) and counters."""
    stats = stack.base / f"{name}.json"
    done_before = succeeded(stack)
    pg_before = settle_pg_stats(stack, wait=0.2)
    redis_before = redis_calls(stack.redis())
    cpu_before = (resource.getrusage(resource.RUSAGE_CHILDREN), tree_cpu(stack.postmaster_pid),
                  tree_cpu(stack.valkey.process.pid))
    argv = worker_argv(kind, "simple", name, burst=True, extra=["--stats", str(stats), *extra])
    if prefix:  # a tracer in front of the worker
        with open(stack.logs / f"{name}.log", "ab") as log:
            proc = subprocess.Popen([*prefix, sys.executable, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                    env={**os.environ, **stack.env(), "PYTHONPATH": str(ROOT)})
    else:
        proc = stack.spawn(name, argv)
    proc.wait()
    child = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = {"worker": child.ru_utime + child.ru_stime - cpu_before[0].ru_utime - cpu_before[0].ru_stime,
           "postgres": tree_cpu(stack.postmaster_pid) - cpu_before[1],
           "redis": tree_cpu(stack.valkey.process.pid) - cpu_before[2]}
    pg_after = settle_pg_stats(stack)
    return {"stats": json.loads(stats.read_text()), "cpu": cpu, "redis": redis_calls(stack.redis()) - redis_before,
            "pg": {k: pg_after[k] - pg_before[k] for k in pg_after}, "done": succeeded(stack) - done_before}


def succeeded(stack: Stack) -> int:
    with stack.db() as conn:
        return conn.execute("SELECT count(*) AS n FROM tasks WHERE status = 'succeeded'").fetchone()["n"]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--strace", action="store_true", help="also count fsync system calls with strace -f -c")
    parser.add_argument("--call-tree", type=Path, metavar="FILE", help="save the profiler's call tree there")
    args = parser.parse_args(argv)
    with servers(statements=True) as stack:
        print_machine(stack)
        limits = print_limits(stack)
        reset_statements(stack)
        before = settle_pg_stats(stack, wait=0.2)
        started = time.perf_counter()
        n = fill(stack, args.tasks, args.blocks, "costs")
        save_seconds = time.perf_counter() - started
        saves = n // tasks_per_lesson(args.blocks)
        save_pg = {k: v - before[k] for k, v in settle_pg_stats(stack).items()}
        save_statements = statements(stack)

        reset_statements(stack)
        ours = burst(stack, "engine", "costs-engine")
        ours_statements = statements(stack)
        if ours["done"] != n:
            raise RuntimeError(f"the worker completed {ours['done']} of {n} tasks; see {stack.logs}")
        fill_noop(stack, n)
        plain = burst(stack, "plain", "costs-noop")

        say()
        say(f"One burst SimpleWorker: {n} tasks ({saves} lessons of {args.blocks} blocks) and {n} no-op jobs:")
        rows = [["wall time per item, ms (worker loop only)", ours["stats"]["work_seconds"] / n * 1000,
                 plain["stats"]["work_seconds"] / n * 1000],
                ["CPU of the worker process, ms", ours["cpu"]["worker"] / n * 1000, plain["cpu"]["worker"] / n * 1000],
                ["CPU of PostgreSQL, ms", ours["cpu"]["postgres"] / n * 1000, plain["cpu"]["postgres"] / n * 1000],
                ["CPU of Redis, ms", ours["cpu"]["redis"] / n * 1000, plain["cpu"]["redis"] / n * 1000],
                ["PostgreSQL statements (round trips, BEGIN/COMMIT included)",
                 sum(c for c, _ in ours_statements.values()) / n, 0.0],
                ["PostgreSQL transactions (xact_commit)", ours["pg"]["commits"] / n, plain["pg"]["commits"] / n],
                ["PostgreSQL write transactions (xids assigned)", ours["pg"]["next_xid"] / n,
                 plain["pg"]["next_xid"] / n],
                ["WAL fsyncs (pg_stat_io)", ours["pg"]["wal_fsyncs"] / n, plain["pg"]["wal_fsyncs"] / n],
                ["WAL bytes", ours["pg"]["wal_bytes"] / n, plain["pg"]["wal_bytes"] / n],
                ["file fsyncs in the worker (receipts, assets)", ours["stats"]["fsyncs"] / n,
                 plain["stats"]["fsyncs"] / n],
                ["wall time in those fsyncs, ms", ours["stats"]["fsync_seconds"] / n * 1000,
                 plain["stats"]["fsync_seconds"] / n * 1000],
                ["Redis commands", ours["redis"] / n, plain["redis"] / n]]
        say(table(["per task (ours) / per job (plain RQ)", "ours", "plain RQ no-op"], rows, digits=2))
        say()
        say(f"Per save of a {args.blocks}-block lesson ({saves} saves, fast-path enqueue included, "
            f"{save_seconds / saves * 1000:.1f} ms each from one connection):")
        say(table(["per save", "value"], [
            ["PostgreSQL statements", sum(c for c, _ in save_statements.values()) / saves],
            ["transactions", save_pg["commits"] / saves], ["write transactions", save_pg["next_xid"] / saves],
            ["WAL fsyncs", save_pg["wal_fsyncs"] / saves]], digits=2))
        say()
        say("PostgreSQL statements per task by named query (pg_stat_statements; mean server time):")
        stmt_rows = sorted(([name, calls / n, ms / calls if calls else 0.0, ms / n]
                            for name, (calls, ms) in ours_statements.items()), key=lambda r: -r[1])
        say(table(["query", "calls per task", "mean ms", "ms per task"], stmt_rows, digits=3))
        writes = ours["pg"]["next_xid"] / n
        say()
        say(table(["ceiling (same run)", "tasks/s"], [
            [f"{limits['commits_1']:,.0f} commits/s (1 conn) / {writes:.2f} write tx per task",
             limits["commits_1"] / writes],
            [f"{limits['commits_4']:,.0f} commits/s (4 conns) / {writes:.2f} write tx per task",
             limits["commits_4"] / writes]]))

        if not args.no_profile:
            profile(stack, n, args.blocks, args.call_tree)
        if args.strace:
            strace_check(stack, min(n, 410), args.blocks)
    return 0


def profile(stack: Stack, n: int, blocks: int, keep: Path | None = None) -> None:
    if find_spec("pyinstrument") is None:
        say("\n(pyinstrument is not installed: `.venv/bin/pip install pyinstrument` for the profile)")
        return
    fill(stack, n, blocks, "profile")
    out = stack.base / "profile.json"
    run = burst(stack, "engine", "costs-profile", extra=["--profile", str(out)])
    data = json.loads(out.read_text())
    total = data["total"] or 1.0
    say()
    say(f"Where one worker's wall time goes (pyinstrument, {n} tasks, "
        f"{run['stats']['work_seconds']:.1f} s under the profiler):")
    say(table(["step of a task", "ms per task", "share"],
              [[k, v / n * 1000, f"{v / total * 100:.0f} %"] for k, v in
               sorted(data["steps"].items(), key=lambda kv: -kv[1]) if v / total >= 0.002], digits=2))
    say()
    say(table(["kind of work", "ms per task", "share"],
              [[k, v / n * 1000, f"{v / total * 100:.0f} %"] for k, v in
               sorted(data["kinds"].items(), key=lambda kv: -kv[1])], digits=2))
    text = out.with_suffix(".txt")
    if keep and text.exists():
        shutil.copy(text, keep)
        say(f"(the full call tree is in {keep})")


def strace_check(stack: Stack, n: int, blocks: int) -> None:
    strace = shutil.which("strace")
    if strace is None:
        say("\n(strace is not installed; skipped the system-call cross-check)")
        return
    n = fill(stack, n, blocks, "strace")
    worker_out, pg_out = stack.base / "strace-worker.txt", stack.base / "strace-pg.txt"
    calls = "fsync,fdatasync,sync_file_range,rename,mkdir"
    pg_trace = subprocess.Popen([strace, "-f", "-c", "-e", f"trace={calls}", "-o", str(pg_out),
                                 "-p", str(stack.postmaster_pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # strace attaches
    run = burst(stack, "engine", "costs-strace",
                prefix=[strace, "-f", "-c", "-e", f"trace={calls}", "-o", str(worker_out)])
    time.sleep(0.5)
    pg_trace.send_signal(2)
    pg_trace.wait(30)

    def counts(path: Path) -> dict[str, int]:
        found = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            parts = line.split()
            if len(parts) >= 5 and parts[-1] in calls.split(",") and parts[3].isdigit():
                found[parts[-1]] = int(parts[3])
            elif len(parts) >= 4 and parts[-1] in calls.split(",") and parts[2].isdigit():
                found[parts[-1]] = int(parts[2])
        return found
    worker, pg = counts(worker_out), counts(pg_out)
    if run["done"] != n:
        say(f"\n(strace: the traced worker completed {run['done']} of {n} tasks; per task over those)")
    n = max(run["done"], 1)
    say()
    say(f"System calls per task, counted by strace -f -c over {n} tasks (PostgreSQL: every process, the "
        "statistics reads of this script included):")
    say(table(["system call", "worker process", "PostgreSQL"],
              [[c, worker.get(c, 0) / n, pg.get(c, 0) / n] for c in calls.split(",")], digits=2))


if __name__ == "__main__":
    run_main(main)
