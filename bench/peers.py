#!/usr/bin/env python3
"""Peers: our engine next to Procrastinate and DBOS Transact, each doing the same durable work per task, in one run.

Ours: bench/engine_overhead.py's run (lessons saved and sent as the web does; the real job through the
real executor, with providers that answer at once in process; fsynced intent and result receipts, the
asset in the media store, slots, ledger, the fenced completion, the bundle task), `--blocks` blocks per
lesson. Procrastinate (bench/peer_procrastinate.py, pinned in bench/requirements-peers.txt, run from
.venv-peers): one job per task writing the same three durable files with our own writer, completion in
its own tables; one job at a time per worker process, as ours. DBOS Transact (bench/peer_dbos.py, pinned
there too): one workflow per task on a DBOS queue, its three steps writing the same files, checkpoints and
completion in DBOS's system tables; its queue set up as DBOS's queue tutorial recommends for running many
workflows at once, with a worker concurrency (`--dbos-concurrency` workflows at once per process, 16 by
default: unlike the other two, not one at a time), and a polling interval (`--dbos-poll`, 0.1 s by default,
DBOS's own default 1 s), which caps each worker at concurrency/poll workflows a second. All on the same
PostgreSQL (fsync and synchronous commit on), a fresh database each run; the order rotates between
repeats. Each run checks that every task ran exactly once (ours: every task succeeded with one attempt;
Procrastinate: every job succeeded, one start each, one intent and one result file per job; DBOS: every
workflow succeeded on its first start, three step checkpoints each, one intent and one result file per
workflow).

Costs per task: CPU of the worker processes, PostgreSQL, Redis and the driver (for Procrastinate the
driver's defer, and DBOS's enqueue, run as a child process, counted with the driver), PostgreSQL commits,
write transactions (xids) and WAL fsyncs, server-wide deltas over the run.

    .venv/bin/python bench/peers.py --install     # once: .venv-peers with the project's lock and the peers
    .venv/bin/python bench/peers.py [--tasks 600] [--repeats 3] [--workers 1,2] [--blocks 10]
                                    [--systems ours,procrastinate,dbos] [--dbos-concurrency 16] [--dbos-poll 0.1]
                                    [--keep]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import ROOT, Stack, run_main, servers, tasks_per_lesson, wait_all_done  # noqa: E402
from bench.report import median, print_machine, say, table  # noqa: E402
from bench.engine_overhead import COST_COLUMNS, Run, _finish, cost_medians, run_ours  # noqa: E402
from bench.measure import CpuSnapshot, redis_calls, settle_pg_stats  # noqa: E402

PEERS_VENV = ROOT / ".venv-peers"
PEER_PYTHON = PEERS_VENV / "bin" / "python"
PEER = str(ROOT / "bench" / "peer_procrastinate.py")
PEER_DBOS = str(ROOT / "bench" / "peer_dbos.py")
SYSTEMS = ("ours", "procrastinate", "dbos")
LABELS = {"ours": "ours", "procrastinate": "Procrastinate", "dbos": "DBOS"}
DBOS_STALL_SECONDS = 60


def install() -> None:
    subprocess.run([sys.executable, "-m", "venv", str(PEERS_VENV)], check=True)
    pip = [str(PEER_PYTHON), "-m", "pip", "install", "--quiet"]
    subprocess.run(pip + ["--require-hashes", "--no-deps", "-r", str(ROOT / "requirements.lock")], check=True)
    subprocess.run(pip + ["-r", str(ROOT / "bench" / "requirements-peers.txt")], check=True)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_procrastinate(stack: Stack, workers: int, tasks: int, batch: int, tag: str) -> Run:
    name = f"peer_{tag}"
    stack.create_database(name, migrate=False)
    work = stack.base / name
    env = {**os.environ, "PEER_DATABASE_URL": stack.pg.url(name), "PEER_WORK_DIR": str(work), "PYTHONPATH": str(ROOT)}
    subprocess.run([str(PEER_PYTHON), PEER, "schema"], env=env, check=True, cwd=ROOT)
    procs = []
    for i in range(workers):
        log = open(stack.logs / f"{tag}-{i}.log", "ab")
        # the worker as Procrastinate's documentation starts one: its command line, the app named by module path
        procs.append(subprocess.Popen([str(PEER_PYTHON), "-m", "procrastinate", "--app", "bench.peer_procrastinate.app",
                                       "worker", "--queues", "media", "--concurrency", "1", "--name", f"{tag}-{i}"],
                                      env=env, cwd=ROOT,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    stack.procs.extend(procs)
    with stack.db(name) as conn:
        deadline = time.monotonic() + 60
        while conn.execute("SELECT count(*) AS n FROM procrastinate_workers").fetchone()["n"] < workers:
            if time.monotonic() > deadline:
                raise RuntimeError(f"Procrastinate's workers did not start; see {stack.logs}")
            time.sleep(0.1)
        before_pg, before_redis = settle_pg_stats(stack, wait=0), redis_calls(stack.redis())
        before_cpu, before_children = CpuSnapshot.take(stack, procs), _children_cpu()
        started = time.time()
        subprocess.run([str(PEER_PYTHON), PEER, "defer", str(tasks), str(batch)], env=env, check=True, cwd=ROOT)
        deferring = _children_cpu() - before_children
        wait_all_done(conn, "SELECT count(*) FILTER (WHERE status = 'succeeded') AS done, "
                            "count(*) FILTER (WHERE status IN ('failed', 'cancelled', 'aborted')) AS bad "
                            "FROM procrastinate_jobs", tasks, "Procrastinate jobs", stack.logs)
        last = conn.execute("SELECT max(at) AS last FROM procrastinate_events WHERE type = 'succeeded'"
                            ).fetchone()["last"]
        tries = conn.execute("SELECT count(*) AS n FROM procrastinate_events WHERE type = 'started'").fetchone()["n"]
    run = _finish(stack, procs, before_cpu, before_pg, before_redis, "Procrastinate", "one job at a time", tasks,
                  last.timestamp() - started)
    run.cpu.driver += deferring
    files = {kind: len(list((work / kind).iterdir())) for kind in ("intents", "results")}
    if tries != tasks or files != {"intents": tasks, "results": tasks}:
        raise RuntimeError(f"Procrastinate ran {tries} starts for {tasks} jobs, files {files}: not exactly once")
    return run


def run_dbos(stack: Stack, workers: int, tasks: int, batch: int, tag: str, concurrency: int, poll: float) -> Run:
    name = f"dbos_{tag}"
    stack.create_database(name, migrate=False)
    work = stack.base / name
    env = {**os.environ, "PEER_DATABASE_URL": stack.pg.url(name), "PEER_WORK_DIR": str(work), "PYTHONPATH": str(ROOT)}
    subprocess.run([str(PEER_PYTHON), PEER_DBOS, "schema"], env=env, check=True, cwd=ROOT)
    names = [f"{tag}-{i}" for i in range(workers)]
    procs = []
    for worker in names:
        log = open(stack.logs / f"dbos-{worker}.log", "ab")
        # a process of its own per worker, each with its own executor_id (bench/peer_dbos.py)
        procs.append(subprocess.Popen([str(PEER_PYTHON), PEER_DBOS, "worker", worker, str(concurrency), str(poll)],
                                      env=env, cwd=ROOT,
                                      stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
        log.close()
    stack.procs.extend(procs)
    deadline = time.monotonic() + 60
    while not all((work / "ready" / worker).exists() for worker in names):
        if time.monotonic() > deadline or any(proc.poll() is not None for proc in procs):
            raise RuntimeError(f"DBOS's workers did not start polling; see {stack.logs}")
        time.sleep(0.1)
    with stack.db(name) as conn:
        before_pg, before_redis = settle_pg_stats(stack, wait=0), redis_calls(stack.redis())
        before_cpu, before_children = CpuSnapshot.take(stack, procs), _children_cpu()
        started = time.time()
        subprocess.run([str(PEER_PYTHON), PEER_DBOS, "enqueue", str(tasks), str(batch)], env=env, check=True, cwd=ROOT)
        enqueuing = _children_cpu() - before_children

        def stalled(row: dict) -> None:
            raise RuntimeError(f"DBOS: {tasks - row['done']} workflows still unfinished after "
                               f"{DBOS_STALL_SECONDS} s without progress; see {stack.logs}")
        row = wait_all_done(conn, "SELECT count(*) FILTER (WHERE status = 'SUCCESS') AS done, "
                                  "count(*) FILTER (WHERE status NOT IN ('ENQUEUED', 'PENDING', 'SUCCESS')) AS bad, "
                                  "max(updated_at) AS last FROM dbos.workflow_status", tasks, "DBOS workflows",
                            stack.logs, stall_seconds=DBOS_STALL_SECONDS, on_stall=stalled)
        once = conn.execute("SELECT count(*) AS n FROM dbos.workflow_status WHERE recovery_attempts = 1 AND "
                            "(SELECT count(*) FROM dbos.operation_outputs o WHERE o.workflow_uuid = "
                            "workflow_status.workflow_uuid) = 3").fetchone()["n"]
    run = _finish(stack, procs, before_cpu, before_pg, before_redis, "DBOS", f"{concurrency} at a time, poll {poll} s",
                  tasks, row["last"] / 1000 - started)
    run.cpu.driver += enqueuing
    files = {kind: len(list((work / kind).iterdir())) for kind in ("intents", "results")}
    if once != tasks or files != {"intents": tasks, "results": tasks}:
        raise RuntimeError(f"DBOS: {once} of {tasks} workflows started once with three steps, files {files}: "
                           "not exactly once")
    return run


def exactly_once_ours(stack: Stack, tag: str, run: Run) -> Run:
    with stack.db(f"ours_{tag}") as conn:
        row = conn.execute("SELECT count(*) AS n, count(*) FILTER (WHERE status = 'succeeded' AND attempts = 1) AS once "
                           "FROM tasks").fetchone()
    if row["n"] != run.items or row["once"] != row["n"]:
        raise RuntimeError(f"ours: {row['once']} of {row['n']} tasks succeeded on their one attempt")
    return run


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--install", action="store_true", help="make .venv-peers and exit")
    parser.add_argument("--tasks", type=int, default=600, help="tasks per run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="1,2", help="worker processes, comma-separated")
    parser.add_argument("--blocks", type=int, default=10, help="blocks per lesson of ours (2 tasks each + a bundle)")
    parser.add_argument("--systems", default=",".join(SYSTEMS),
                        help=f"which to run, comma-separated, of {', '.join(SYSTEMS)}")
    parser.add_argument("--dbos-concurrency", type=int, default=16,
                        help="DBOS: the queue's worker_concurrency, workflows at once per worker process")
    parser.add_argument("--dbos-poll", type=float, default=0.1,
                        help="DBOS: the queue's polling_interval_sec (DBOS's default is 1 s)")
    parser.add_argument("--keep", action="store_true", help="leave the servers' directory (and the logs) in place")
    args = parser.parse_args(argv)
    if args.install:
        install()
        return 0
    if not PEER_PYTHON.exists():
        say(f"{PEERS_VENV} is missing: run .venv/bin/python bench/peers.py --install first")
        return 2
    counts = [int(x) for x in args.workers.split(",")]
    systems = [x.strip() for x in args.systems.split(",") if x.strip()]
    if not systems or set(systems) - set(SYSTEMS):
        parser.error(f"--systems takes some of {', '.join(SYSTEMS)}, comma-separated")
    per_lesson = tasks_per_lesson(args.blocks)
    ours_tasks = max(1, math.ceil(args.tasks / per_lesson)) * per_lesson
    runs: list[Run] = []
    with servers(keep=args.keep) as stack:
        if args.keep:
            say(f"servers and logs in {stack.base} (left in place)")
        print_machine(stack)
        for rep in range(args.repeats):
            for workers in counts:
                tag = f"r{rep}-{workers}"
                makers = {"ours": lambda: exactly_once_ours(stack, tag, run_ours(stack, "simple", workers, ours_tasks,
                                                                                 args.blocks, tag)),
                          "procrastinate": lambda: run_procrastinate(stack, workers, args.tasks, per_lesson, tag),
                          "dbos": lambda: run_dbos(stack, workers, args.tasks, per_lesson, tag, args.dbos_concurrency,
                                                   args.dbos_poll)}
                shift = rep % len(systems)   # each system goes first in turn
                for system in systems[shift:] + systems[:shift]:
                    run = makers[system]()
                    runs.append(run)
                    say(f"  repeat {rep + 1}: {run.who:<13} x{run.workers}: {run.items} in {run.seconds:.2f} s = "
                        f"{run.rate:.1f}/s")
        report(runs, counts, [LABELS[s] for s in systems])
    return 0


def report(runs: list[Run], counts: list[int], systems: list[str]) -> None:
    rows, costs = [], []
    for workers in counts:
        ours = [r for r in runs if r.who == "ours" and r.workers == workers]
        for who in systems:
            group = [r for r in runs if r.who == who and r.workers == workers]
            ratios = [o.rate / r.rate for o, r in zip(ours, group)] if who != "ours" else []
            rows.append([workers, who, median(r.rate for r in group), " / ".join(f"{r.rate:.1f}" for r in group),
                         f"{median(ratios):.2f}x" if ratios else "", " / ".join(f"{x:.2f}" for x in ratios)])
            costs.append([workers, who, *cost_medians(group)])
    how = {r.who: r.cls for r in runs}
    peers = "".join(f"; {who}: {how[who]}" for who in systems if who != "ours")
    say()
    say("Tasks per second, median of repeats and per repeat (ours / this: per repeat, then median); every task "
        f"ran exactly once in every run{peers}:")
    say(table(["workers", "who", "tasks/s", "tasks/s per repeat", "ours / this", "ours / this per repeat"], rows))
    say()
    say("Cost per task, medians; CPU in ms; PostgreSQL counters are server-wide deltas over the run:")
    say(table(["workers", "who", *COST_COLUMNS], costs, digits=2))


if __name__ == "__main__":
    run_main(main)
