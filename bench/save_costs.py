#!/usr/bin/env python3
"""CPU per save: what one `POST /api/contents` (a 20-block lesson) costs the web process, PostgreSQL and
Valkey, ours next to plain RQ's app (bench/naive_web.py), in one run.

Both apps run in this process behind Flask's test client, one request at a time, so the web's CPU is
this process's CPU and nothing waits for a free worker: the figures are the work a save is, not its
latency. PostgreSQL's CPU is that of the web's own sessions (read from /proc), Valkey's from its
INFO. Each repeat saves `--saves` lessons through each app, the order alternating from one repeat to
the next; the table gives medians over repeats, and the ratio of the totals (ours / plain RQ) per
repeat, then its median.

    .venv/bin/python bench/save_costs.py [--saves 300] [--repeats 3] [--blocks 20]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import editor_token, lesson, quiet_logs, run_main, servers  # noqa: E402
from bench.report import median, print_machine, say, table  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def backend_cpu(pid: int) -> float:
    """CPU seconds (user + system) of one PostgreSQL backend."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def valkey_cpu(stack) -> float:
    info = stack.redis().info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


def web_sessions(stack) -> list[int]:
    """The backend pids of the sessions the web app holds (its pool), not the benchmark's own."""
    with stack.db() as conn:
        return [r["pid"] for r in conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE application_name = 'mediapipe' AND pid <> pg_backend_pid() "
            "AND datname = current_database()").fetchall()]


def measure(stack, client, bodies: list[str], headers: dict) -> dict[str, float]:
    """ms per save: the web's CPU, its PostgreSQL sessions' CPU, Valkey's CPU."""
    sessions = web_sessions(stack)
    pg_before = sum(backend_cpu(pid) for pid in sessions)
    valkey_before = valkey_cpu(stack)
    cpu_before = time.process_time()
    for body in bodies:
        response = client.post("/api/contents", data=body, headers=headers)
        if response.status_code != 202:
            raise RuntimeError(f"a save answered {response.status_code}: {response.get_data(as_text=True)[:300]}")
    web = time.process_time() - cpu_before
    pg = sum(backend_cpu(pid) for pid in sessions) - pg_before
    valkey = valkey_cpu(stack) - valkey_before
    n = len(bodies)
    return {"web": web * 1000 / n, "postgres": pg * 1000 / n, "valkey": valkey * 1000 / n,
            "total": (web + pg + valkey) * 1000 / n}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--saves", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args(argv)
    with servers() as stack:
        print_machine(stack)
        token = editor_token(stack)
        os.environ.update(stack.env(MAX_PENDING_TASKS="10000000"))
        import bench.naive_web
        from web import create_app
        apps = {"ours": create_app().test_client(), "plain RQ": bench.naive_web.create_app().test_client()}
        headers = {"Content-Type": "application/json", "X-API-Key": token}
        counter = iter(range(10**9))

        def bodies(n: int) -> list[str]:
            return [json.dumps(lesson(args.blocks, f"costs-{next(counter)}")) for _ in range(n)]
        runs: dict[str, list[dict[str, float]]] = {name: [] for name in apps}
        with quiet_logs(stack.logs / "driver.log"):
            for client in apps.values():   # warm-up: imports, the pool's connections, prepared statements
                measure(stack, client, bodies(20), headers)
            for repeat in range(args.repeats):
                for name in (list(apps) if repeat % 2 == 0 else list(apps)[::-1]):
                    runs[name].append(measure(stack, apps[name], bodies(args.saves), headers))
                    stack.redis().flushdb()
        report(args, runs)
    return 0


def report(args, runs: dict[str, list[dict[str, float]]]) -> None:
    parts = ["web", "postgres", "valkey", "total"]
    rows = [[name, *[median(r[p] for r in found) for p in parts]] for name, found in runs.items()]
    ratios = [o["total"] / p["total"] for o, p in zip(runs["ours"], runs["plain RQ"])]
    say()
    say(f"CPU per save of a {args.blocks}-block lesson, ms (median of {args.repeats} repeats of {args.saves} saves "
        "each, one request at a time):")
    say(table(["app", "web process", "PostgreSQL (web's sessions)", "Valkey", "total"], rows, digits=2))
    say(f"ours / plain RQ, total CPU per save: {median(ratios):.2f}x (per repeat: "
        f"{' / '.join(f'{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    run_main(main)
