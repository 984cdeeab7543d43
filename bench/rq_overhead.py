#!/usr/bin/env python3
"""What RQ itself costs per job, stock and as our workers run it.

No-op jobs (JSON messages, as ours) drained by one burst worker, in three set-ups side by side, their
repeats interleaved:

- `stock, python parser`: RQ's SimpleWorker with redis-py's pure-Python reply parser (redis-py without
  hiredis installed);
- `stock, hiredis`: the same worker with hiredis, which redis-py uses when it is installed;
- `ours`: hiredis and `bin.worker.SparseBookkeeping` (RQ's worker heartbeat, state and suspension check
  at most once a second), as the Procfile's workers run.

Figures per job: the worker's CPU (its process's user + system time while it drains), wall time, and Redis
commands (INFO commandstats). Median of the repeats, and each repeat.

    .venv/bin/python bench/rq_overhead.py [--jobs 3000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SETUPS = ("stock, python parser", "stock, hiredis", "ours")


def drain(setup: str, url: str, jobs: int) -> dict:
    """In a child process: fill a queue with `jobs` no-op messages, drain it with one burst worker, say the cost."""
    if setup == "stock, python parser":
        sys.modules["hiredis"] = None   # redis-py then finds no hiredis, as when it is not installed
    import redis
    from rq import Queue, SimpleWorker
    from rq.serializers import JSONSerializer

    connection = redis.Redis.from_url(url)
    connection.flushdb()
    queue = Queue("overhead", connection=connection, serializer=JSONSerializer)
    with connection.pipeline() as pipe:
        queue.enqueue_many([Queue.prepare_data("bench.jobs.noop", result_ttl=60, timeout=-1) for _ in range(jobs)],
                           pipeline=pipe)
        pipe.execute()
    cls = SimpleWorker
    if setup == "ours":
        from bin.worker import SparseBookkeeping
        cls = type("Ours", (SparseBookkeeping, SimpleWorker), {})
    worker = cls([queue], connection=connection, serializer=JSONSerializer)
    connection.config_resetstat()
    cpu, wall = time.process_time(), time.perf_counter()
    worker.work(burst=True, logging_level="WARNING", with_scheduler=False)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    commands = sum(v["calls"] for v in connection.info("commandstats").values())
    return {"setup": setup, "parser": redis.connection.DefaultParser.__name__, "jobs": jobs,
            "cpu_ms": cpu * 1000 / jobs, "wall_ms": wall * 1000 / jobs, "commands": commands / jobs}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(drain(args.child, args.url, args.jobs)))
        return 0

    from bench.common import servers
    from bench.report import median, print_machine, say, table

    with servers() as stack:
        print_machine(stack)
        runs: dict[str, list[dict]] = {setup: [] for setup in SETUPS}
        for rep in range(args.repeats):
            for setup in SETUPS:
                out = subprocess.run([sys.executable, __file__, "--child", setup, "--url", stack.redis_url,
                                      "--jobs", str(args.jobs)], check=True, capture_output=True, text=True,
                                     cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
                run = json.loads(out.stdout.strip().splitlines()[-1])
                runs[setup].append(run)
                say(f"  repeat {rep + 1}: {setup:<22} ({run['parser']}): CPU {run['cpu_ms']:.2f} ms, "
                    f"wall {run['wall_ms']:.2f} ms, {run['commands']:.1f} Redis commands per job")
        base = median(r["cpu_ms"] for r in runs[SETUPS[0]])
        rows = [[setup, median(r["cpu_ms"] for r in runs[setup]), median(r["wall_ms"] for r in runs[setup]),
                 median(r["commands"] for r in runs[setup]),
                 f"{median(r['cpu_ms'] for r in runs[setup]) / base:.2f}"] for setup in SETUPS]
        say(f"\n{args.jobs} no-op jobs per run, one burst worker, medians of {args.repeats} interleaved repeats:")
        say(table(["set-up", "worker CPU ms/job", "wall ms/job", "Redis commands/job", "CPU vs stock"], rows,
                  digits=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
