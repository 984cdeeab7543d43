#!/usr/bin/env python3
"""Two checkouts of this repository side by side, in lockstep: what one media task costs the engine itself.

Each checkout runs in a process of its own, on its own PostgreSQL and Valkey, and does tasks through its
real job (the one its `pipeline.dispatch.JOB_FUNC` names, `pipeline.message.run_task` today) and executor
with an instant in-process provider (bench/instant_worker.py), called directly: RQ's own loop, the same
for both, is left out. The two take turns, one batch each, the order alternating from round to round, so
both meet the same machine; the result is each one's median wall time, CPU and PostgreSQL's CPU per task and
the median (and quartiles) of the per-round ratios, after / before. This machine's speed drifts by a factor of
two within minutes, so a ratio is only worth something when both sides were measured together like this.

    .venv/bin/python bench/task_ab.py --before ../other-checkout [--after .] [--rounds 60] [--batch 30] [--per-message 1]

`--per-message 8` gives the job eight task ids at a time, as a message does when its queue holds a backlog.
With BENCH_PG_BINDIR (bench/common.py) both sides run on that PostgreSQL installation instead of the embedded one.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve()
BLOCKS = 20    # per lesson
WARM_UP = 20   # tasks each side does before the first measured batch (connections, prepared statements)


def serve(root: Path, tasks: int, per_message: int) -> None:
    """The child: fill one stack with lessons, then do `n` tasks for every line `n` read; print the cost of each batch."""
    sys.path.insert(0, str(root))
    from bench.common import draft, quiet_logs, servers
    from bench.measure import tree_cpu
    with servers() as stack:
        os.environ.update(stack.env())
        from bench.instant_worker import install_engine_runtime
        install_engine_runtime(None)
        from pipeline import dispatch, versions
        module, _, name = dispatch.JOB_FUNC.rpartition(".")   # the checkout's own job, whatever its module
        run_task = getattr(importlib.import_module(module), name)
        cfg = stack.settings()
        if "by" in inspect.signature(versions.save).parameters:
            from pipeline.core.principal import Principal
            who = {"by": Principal.without_key("bench", role="editor")}
        else:   # a checkout from before a save was given its caller as one Principal
            who = {"actor": "bench"}
        with stack.db() as conn, quiet_logs(stack.logs / "driver.log"):
            for i in range(-(-tasks // (2 * BLOCKS))):   # media tasks only: two per block
                versions.save(conn, draft(BLOCKS, f"ab-{i}"), cfg, **who)
            ids = iter(r["id"] for r in conn.execute(
                "SELECT id FROM tasks WHERE kind <> 'bundle' ORDER BY id").fetchall())
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        print(json.dumps({"commit": commit}), flush=True)
        with quiet_logs(stack.logs / "worker.log"):
            for line in sys.stdin:
                batch = [next(ids) for _ in range(int(line))]
                pg = tree_cpu(stack.postmaster_pid)
                cpu, wall = time.process_time(), time.perf_counter()
                for k in range(0, len(batch), per_message):
                    group = batch[k:k + per_message]
                    statuses = run_task(*group).split()
                    if statuses != ["succeeded"] * len(group):
                        raise SystemExit(f"tasks {group} ended {statuses}: the comparison would be unfair")
                done = {"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                        "pg": tree_cpu(stack.postmaster_pid) - pg}
                print(json.dumps({what: seconds / len(batch) for what, seconds in done.items()}), flush=True)


class Side:
    def __init__(self, name: str, root: Path, tasks: int, per_message: int) -> None:
        self.name, self.root, self.batches = name, root, []
        self.proc = subprocess.Popen([sys.executable, str(HERE), "--serve", str(root), str(tasks), str(per_message)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.commit = json.loads(self._read())["commit"]

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the {self.name} side ({self.root}) stopped; its error is above")
        return line

    def run(self, n: int) -> dict:
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()
        return json.loads(self._read())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(60)


def quartiles(values: list[float]) -> str:
    low, mid, high = statistics.quantiles(values, n=4)
    return f"{mid:.3f} (quartiles {low:.3f} to {high:.3f})"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", type=Path, help="a checkout of this repository (a git worktree); required")
    parser.add_argument("--after", type=Path, default=HERE.parent.parent)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--batch", type=int, default=30, help="tasks per side per round")
    parser.add_argument("--per-message", type=int, default=1, help="task ids per call of the job (1 to 8)")
    parser.add_argument("--serve", nargs=3, metavar=("ROOT", "TASKS", "PER_MESSAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve:
        serve(Path(args.serve[0]).resolve(), int(args.serve[1]), int(args.serve[2]))
        return 0
    if args.before is None:
        parser.error("--before: name the checkout to compare with (git worktree add ../before <commit>)")
    tasks = args.rounds * args.batch + WARM_UP
    sides = [Side(name, root.resolve(), tasks, args.per_message)
             for name, root in (("before", args.before), ("after", args.after))]
    try:
        for side in sides:
            side.run(WARM_UP)
        for i in range(args.rounds):
            for side in sides if i % 2 == 0 else sides[::-1]:
                side.batches.append(side.run(args.batch))
    finally:
        for side in sides:
            side.close()
    before, after = sides
    print(f"{args.rounds} rounds of {args.batch} media tasks per side, {args.per_message} per call of the job, "
          "RQ left out:")
    for side in sides:
        print(f"  {side.name} ({side.commit}): wall {statistics.median(b['wall'] for b in side.batches) * 1000:.2f} ms, "
              f"CPU {statistics.median(b['cpu'] for b in side.batches) * 1000:.2f} ms, "
              f"PostgreSQL's CPU {statistics.median(b['pg'] for b in side.batches) * 1000:.2f} ms per task "
              "(medians of rounds)")
    for what, said in (("wall", "wall time"), ("cpu", "CPU of the process"), ("pg", "PostgreSQL's CPU")):
        ratios = [a[what] / b[what] for a, b in zip(after.batches, before.batches) if b[what] > 0]   # CPU: in ticks
        print(f"  after / before, {said}: {quartiles(ratios)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
