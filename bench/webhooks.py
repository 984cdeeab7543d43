#!/usr/bin/env python3
"""Webhooks: how fast the webhook pool sends, and what an event costs the transactions that write one.

* Throughput: MESSAGES events (approvals withdrawn, written by their trigger in one transaction) for one endpoint
  whose receiver (testkit/receiver.py, in this process, verifying every signature with `standardwebhooks`) answers
  200 at once; `bin/dispatch` and the Procfile's `rq worker-pool -w bin.worker.WebhookWorker -n N webhook` send
  them. Messages per second from the commit to the last one delivered, and each message's latency
  (delivered_at - the event's created_at), p50 and p99.
* Cost: p50 and p99 of a save (`versions.save` of a BLOCKS-block lesson, one thread, no HTTP) and of an approval
  followed by its withdrawal (`review.approve` + `review.withdraw` of a complete version: the transactions whose
  triggers write events), for a team with no endpoint and a team with two endpoints; the two alternate operation
  by operation. A save writes no event (its tasks are not finished yet), so its two columns differ by noise; the
  approval's pair writes two events and four messages.

    .venv/bin/python bench/webhooks.py [--messages 2000] [--workers 2] [--saves 200] [--blocks 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import BENCH, BENCH_REVIEWER, Stack, draft, quiet_logs, run_main, servers  # noqa: E402
from bench.report import percentile, print_machine, say, table  # noqa: E402

BENCH_ASSET = "0" * 64
URL_ENV = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8", "MAX_PENDING_TASKS": "100000000"}


def throughput(stack: Stack, messages: int, workers: int) -> dict:
    from pipeline import webhooks
    from testkit.receiver import Receiver

    stack.use_database(f"throughput_{workers}")
    env = stack.env(**URL_ENV)
    receiver = Receiver().start()
    try:
        with stack.db() as conn:
            receiver.secret = webhooks.add(conn, stack.settings(**URL_ENV), team="default", url=receiver.url,
                                           events="version.withdrawn", by=BENCH).secret
        procs = [stack.spawn("dispatcher", [str(Path(__file__).resolve().parent.parent / "bin" / "dispatch")], env),
                 stack.spawn("webhook-pool", ["-m", "rq.cli", "worker-pool", "--quiet", "-c", "bin.rqconfig", "-w",
                                              "bin.worker.WebhookWorker", "-n", str(workers), "webhook"], env)]
        _wait_workers(stack, workers)
        with stack.db() as conn:
            with conn.transaction():
                conn.execute("INSERT INTO contents (title, locale, current_version, approved_version) "
                             "SELECT 'bench', 'zh-CN', 1, 1 FROM generate_series(1, %s)", (messages,))
                conn.execute("UPDATE contents SET approved_version = NULL")
            started = time.monotonic()
            while conn.execute("SELECT count(*) AS n FROM webhook_deliveries WHERE status = 'delivered'"
                               ).fetchone()["n"] < messages:
                if any(p.poll() is not None for p in procs):
                    raise RuntimeError(f"a process ended; see {stack.logs}")
                time.sleep(0.05)
            seconds = time.monotonic() - started
            latency = [r["s"] for r in conn.execute(
                "SELECT extract(epoch FROM d.delivered_at - e.created_at)::float8 AS s FROM webhook_deliveries d "
                "JOIN webhook_events e ON e.id = d.event_id").fetchall()]
            attempts = conn.execute("SELECT count(*) AS n FROM webhook_attempts").fetchone()["n"]
        verified = sum(1 for m in receiver.messages() if m.verified)
    finally:
        stack.stop_all()
        receiver.stop()
    return {"workers": workers, "messages": messages, "seconds": seconds, "per_second": messages / seconds,
            "p50": percentile(latency, 50), "p99": percentile(latency, 99), "attempts": attempts,
            "verified": verified}


def _wait_workers(stack: Stack, n: int, timeout: float = 60) -> None:
    from rq import Worker
    deadline = time.monotonic() + timeout
    while len([w for w in Worker.all(connection=stack.redis()) if w.queue_names() == ["webhook"]]) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{n} webhook workers not registered after {timeout} s; see {stack.logs}")
        time.sleep(0.1)


def costs(stack: Stack, saves: int, blocks: int, rounds: int) -> dict[str, dict[str, list[float]]]:
    """Per variant, the seconds of each save and of each approve + withdraw: the variants are two teams, one without
    an endpoint and one with two, and every operation alternates between them, so a change in the machine's load
    falls on both alike."""
    from pipeline import review, versions, webhooks

    cfg = stack.settings(**URL_ENV)
    teams = {"no endpoint": "plain", "two endpoints": "hooked"}
    editors = {team: dataclasses.replace(BENCH, team=team) for team in teams.values()}   # each saves in its team
    found = {v: {"save": [], "approve+withdraw": []} for v in teams}
    with stack.db() as conn:
        conn.execute("INSERT INTO assets (sha256, media_type, size) VALUES (%s, 'image/png', 1)", (BENCH_ASSET,))
        conn.execute("INSERT INTO teams (name) VALUES ('plain'), ('hooked')")
        for _ in range(2):
            webhooks.add(conn, cfg, team="hooked", url="http://127.0.0.1:9/bench", events=None, by=BENCH)
        for round_no in range(rounds):
            made = []
            for i in range(saves):
                for variant, team in teams.items():
                    started = time.perf_counter()
                    saved = versions.save(conn, draft(blocks, f"{team}-{round_no}-{i}"), cfg, by=editors[team])
                    found[variant]["save"].append(time.perf_counter() - started)
                    made.append((variant, saved.content_id))
            # complete every version as its workers would leave it, then approve and withdraw each
            conn.execute("UPDATE tasks SET status = 'succeeded', asset_sha256 = %s WHERE content_id = ANY(%s)",
                         (BENCH_ASSET, [c for _, c in made]))
            for variant, content_id in made:
                started = time.perf_counter()
                review.approve(conn, content_id, 1, by=BENCH_REVIEWER)
                review.withdraw(conn, content_id, 1, "bench", by=BENCH_REVIEWER)
                found[variant]["approve+withdraw"].append(time.perf_counter() - started)
        written = conn.execute("SELECT count(*) AS n FROM webhook_deliveries").fetchone()["n"]
    # per hooked version, two endpoints told of its completion (written by the setup), approval and withdrawal
    assert written == 6 * rounds * saves, written
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--workers", type=int, nargs="+", default=[2])
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with servers() as stack:
        print_machine(stack)
        with quiet_logs(stack.logs / "bench.log"):
            sent = [throughput(stack, args.messages, n) for n in args.workers]
            stack.use_database("costs")
            found = costs(stack, args.saves, args.blocks, args.rounds)
        say(f"\nThe webhook pool sending {args.messages} messages to a receiver on this machine:\n")
        say(table(["workers", "messages", "seconds", "messages/s", "latency p50 s", "latency p99 s", "attempts",
                   "verified"],
                  [[r["workers"], r["messages"], r["seconds"], r["per_second"], r["p50"], r["p99"], r["attempts"],
                    r["verified"]] for r in sent], digits=2))
        say(f"\nMilliseconds per operation, {args.rounds} rounds of {args.saves} each ({args.blocks}-block lessons):\n")
        rows = []
        for op in ("save", "approve+withdraw"):
            none, two = found["no endpoint"][op], found["two endpoints"][op]
            rows.append([op, 1000 * percentile(none, 50), 1000 * percentile(two, 50), 1000 * percentile(none, 99),
                         1000 * percentile(two, 99),
                         f"{100 * (percentile(two, 50) / percentile(none, 50) - 1):+.1f} %"])
        say(table(["operation", "p50, none", "p50, two endpoints", "p99, none", "p99, two endpoints", "p50 change"],
                  rows, digits=2))
    return 0


if __name__ == "__main__":
    run_main(main)
