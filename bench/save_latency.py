#!/usr/bin/env python3
"""Save latency: p50 and p99 of `POST /api/contents` (a 20-block lesson) from 20 concurrent clients
against gunicorn serving `web:create_app()` with the Procfile's 4 workers.

Side by side in the same run, with the same clients and the same gunicorn settings:
* ours: authentication, one save transaction (admission under its advisory lock, version, 41
  tasks, 40 dependencies, 40 outbox rows), then the fast-path enqueue of the 40 runnable tasks;
* plain RQ (bench/naive_web.py): the same body validated by the same parser, 40 jobs enqueued
  straight into Redis;
* ours with busy workers: the same, with workers registered on the queues as the Procfile's pools run them by
  default (4 on `image`, 4 on `tts`, in RQ's per-queue sets of workers, which a starting worker joins and our
  sender reads) but none taking a message, as when every worker is on a call: once a queue holds a backlog our
  sender packs up to eight tasks in a message
  (`pipeline.core.lanes.tasks_per_message`). With no worker registered it sends one task a message (how many
  workers will come is not known), which the first variant measures;
* the HTTP floor: `GET /healthz` of our app;
* ours without HTTP: `versions.save` + `dispatch.send_now` called from 20 threads, each with its
  own connection (the pipeline's share of the latency), and from one thread (a save's own duration,
  which is how long it holds the admission lock).
MAX_PENDING_TASKS is raised so that admission never refuses. Variants alternate round by round. No worker runs: after each round every saved version is
cancelled through `versions.cancel` (its waiting tasks leave the admission count) and Redis is
emptied, so every round starts with nothing pending.

    .venv/bin/python bench/save_latency.py [--clients 20] [--requests 10] [--rounds 3] [--blocks 20]
"""

from __future__ import annotations

import argparse
import http.client
import json
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (BENCH, Stack, draft, editor_token, free_port, lesson, quiet_logs, run_main,  # noqa: E402
                    servers)
from bench.report import median, percentile, print_machine, say, table  # noqa: E402


def start_gunicorn(stack: Stack, app: str, name: str, env: dict[str, str]) -> int:
    port = free_port()
    stack.spawn(name, ["-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "4", "--log-level", "warning",
                       app], env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/healthz")
            if conn.getresponse().status == 200:
                return port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"gunicorn {name} did not answer on port {port}; see {stack.logs / (name + '.log')}")


def run_together(client, work: list[list], start: threading.Barrier) -> float:
    """One thread per client's list of work, released together by `start`; the wall time until all finish."""
    threads = [threading.Thread(target=client, args=(mine,)) for mine in work]
    for t in threads:
        t.start()
    start.wait()
    began = time.perf_counter()
    for t in threads:
        t.join()
    return time.perf_counter() - began


def http_round(port: int, method: str, path: str, bodies: list[list[bytes | None]], headers: dict,
               expect: int) -> tuple[list[float], float]:
    """Each client sends its bodies one after another; all clients start together. Latencies and wall time."""
    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start = threading.Barrier(len(bodies) + 1)

    def client(mine: list[bytes | None]) -> None:
        start.wait()
        for body in mine:
            began = time.perf_counter()
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                took = time.perf_counter() - began
                with lock:
                    if response.status == expect:
                        latencies.append(took)
                    else:
                        errors.append(f"{response.status}")
            finally:
                conn.close()

    wall = run_together(client, bodies, start)
    if errors:
        raise RuntimeError(f"{len(errors)} requests to {path} answered {sorted(set(errors))}, not {expect}")
    return latencies, wall


def direct_round(stack: Stack, drafts: list[list]) -> tuple[list[float], float]:
    from pipeline import dispatch, versions
    cfg = stack.settings(MAX_PENDING_TASKS="10000000")
    latencies: list[float] = []
    lock = threading.Lock()
    start = threading.Barrier(len(drafts) + 1)

    def client(mine: list) -> None:
        conn_redis = stack.redis()
        with stack.db() as conn:
            start.wait()
            for d in mine:
                began = time.perf_counter()
                saved = versions.save(conn, d, cfg, by=BENCH, send_at_once=True)
                dispatch.send_now(conn, conn_redis, saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
                with lock:
                    latencies.append(time.perf_counter() - began)

    sampler = LockSampler(stack) if len(drafts) > 1 else None
    wall = run_together(client, drafts, start)
    if sampler:
        WAITING.append(sampler.stop())
    return latencies, wall


WAITING: list[float] = []   # mean sessions waiting on the admission lock, per concurrent direct round


class LockSampler:
    """Samples how many sessions wait on an advisory lock (the admission lock) every 10 ms."""

    def __init__(self, stack: Stack) -> None:
        self.samples: list[int] = []
        self._stop = threading.Event()
        self._conn = stack.db()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.01):
            self.samples.append(self._conn.execute(
                "SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND wait_event = 'advisory'").fetchone()["n"])

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._conn.close()
        return sum(self.samples) / max(len(self.samples), 1)


def reset(stack: Stack) -> int:
    """Cancel every saved version (its waiting tasks stop counting for admission) and empty Redis."""
    from pipeline import versions
    with stack.db() as conn:
        pending = conn.execute("SELECT count(*) AS n FROM tasks WHERE status IN ('ready', 'running', 'retry')"
                               ).fetchone()["n"]
        for row in conn.execute("SELECT content_id, version FROM versions WHERE cancel_requested_at IS NULL"
                                ).fetchall():
            versions.cancel(conn, row["content_id"], row["version"], by=BENCH)
    stack.redis().flushdb()
    return pending


BUSY_WORKERS = {"image": 4, "tts": 4}   # the Procfile's pools on each queue with the default settings (bin/workers)


def with_busy_workers(stack: Stack, run):
    """`run()` while workers are registered on the queues (RQ's per-queue sets of workers) and none takes a message."""
    from rq.worker_registration import WORKERS_BY_QUEUE_KEY
    conn_redis = stack.redis()
    keys = [WORKERS_BY_QUEUE_KEY % queue for queue in BUSY_WORKERS]
    for queue, count in BUSY_WORKERS.items():
        conn_redis.sadd(WORKERS_BY_QUEUE_KEY % queue, *(f"rq:worker:busy-{queue}-{i}" for i in range(count)))
    try:
        return run()
    finally:
        conn_redis.delete(*keys)


def variants(stack: Stack, args, token: str, ours_port: int, plain_port: int) -> dict:
    """name -> run(requests per client) -> (latencies, wall seconds)."""
    counter = iter(range(10**9))
    json_headers = {"Content-Type": "application/json"}

    def bodies(clients: int, requests: int) -> list[list[bytes]]:
        return [[json.dumps(lesson(args.blocks, f"save-{next(counter)}")).encode() for _ in range(requests)]
                for _ in range(clients)]

    def drafts(clients: int, requests: int) -> list[list]:
        return [[draft(args.blocks, f"direct-{next(counter)}") for _ in range(requests)] for _ in range(clients)]
    c = args.clients
    return {
        "ours: POST /api/contents (gunicorn, 4 workers)": lambda r: http_round(
            ours_port, "POST", "/api/contents", bodies(c, r), {**json_headers, "X-API-Key": token}, 202),
        "ours with busy workers: POST /api/contents (gunicorn, 4 workers)": lambda r: with_busy_workers(
            stack, lambda: http_round(ours_port, "POST", "/api/contents", bodies(c, r),
                                      {**json_headers, "X-API-Key": token}, 202)),
        "plain RQ: POST /api/contents (gunicorn, 4 workers)": lambda r: http_round(
            plain_port, "POST", "/api/contents", bodies(c, r), json_headers, 202),
        "HTTP floor: GET /healthz of our app": lambda r: http_round(
            ours_port, "GET", "/healthz", [[None] * r for _ in range(c)], {}, 200),
        f"ours without HTTP: versions.save + send_now, {c} threads": lambda r: direct_round(stack, drafts(c, r)),
        "ours without HTTP, 1 thread (no waiting on the admission lock)": lambda r: direct_round(
            stack, drafts(1, r * 2)),
    }


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=10, help="requests per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args(argv)
    with servers() as stack:
        print_machine(stack)
        token = editor_token(stack)
        env = stack.env(MAX_PENDING_TASKS="10000000")
        ours_port = start_gunicorn(stack, "web:create_app()", "gunicorn-ours", env)
        plain_port = start_gunicorn(stack, "bench.naive_web:create_app()", "gunicorn-plain", env)
        runs = variants(stack, args, token, ours_port, plain_port)
        results: dict[str, list[float]] = {name: [] for name in runs}
        rates: dict[str, list[float]] = {name: [] for name in runs}
        pending_max = 0
        with quiet_logs(stack.logs / "driver.log"):
            for run in runs.values():   # warm-up: every gunicorn worker imports and connects
                run(2)
            reset(stack)
            for rnd in range(args.rounds):
                for name in (list(runs) if rnd % 2 == 0 else list(runs)[::-1]):
                    latencies, wall = runs[name](args.requests)
                    results[name] += latencies
                    rates[name].append(len(latencies) / wall)
                    pending_max = max(pending_max, reset(stack))
        report(args, results, rates, pending_max)
    return 0


def report(args, results: dict[str, list[float]], rates: dict[str, list[float]], pending_max: int) -> None:
    rows = [[name, len(lat), percentile(lat, 50) * 1000, percentile(lat, 90) * 1000, percentile(lat, 99) * 1000,
             max(lat) * 1000, median(rates[name])] for name, lat in results.items()]
    say()
    say(f"{args.clients} concurrent clients, {args.blocks}-block lesson, {args.rounds} rounds of {args.clients} x "
        f"{args.requests} requests per variant (latency in ms; requests/s: median over rounds; at most "
        f"{pending_max:,} tasks were pending at the end of a round):")
    say(table(["variant", "requests", "p50", "p90", "p99", "max", "requests/s"], rows))
    names = list(results)
    ours, busy, plain = results[names[0]], results[names[1]], results[names[2]]
    say()
    if WAITING:
        say(f"while {args.clients} threads saved without HTTP, {median(WAITING[1:] or WAITING):.1f} sessions on "
            "average were waiting on the admission lock (pg_stat_activity, sampled every 10 ms)")
    for label, mine in (("ours", ours), ("ours with busy workers", busy)):
        say(f"{label} / plain RQ over HTTP: p50 {percentile(mine, 50) / percentile(plain, 50):.2f}x, "
            f"p99 {percentile(mine, 99) / percentile(plain, 99):.2f}x")


if __name__ == "__main__":
    run_main(main)
