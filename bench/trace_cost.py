#!/usr/bin/env python3
"""What tracing costs a save: p50 and p99 of `POST /api/contents` (a 20-block lesson) from 20 concurrent clients,
against two gunicorn servers of `web:create_app()` (4 workers each, as bench/save_latency.py runs them) on the same
database, one with tracing off and one with OTEL_EXPORTER_OTLP_ENDPOINT set (the SDK's defaults otherwise: a batch
span processor exporting every 5 s) to a real OTLP/HTTP receiver in this process (testkit/otlp.py, which decodes
every export, on the same cores). The variants alternate round by round; after each round the saved versions are
cancelled and Redis emptied (bench/save_latency.py `reset`), so every round starts with nothing pending.

Off, what tracing adds to a save is one call of `tracing.span` (a shared nullcontext), one of `tracing.traceparent`
and a None parameter: the bench also times those calls alone, in this process, against the save's p50.

    .venv/bin/python bench/trace_cost.py [--clients 20] [--requests 10] [--rounds 3] [--blocks 20]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import editor_token, lesson, quiet_logs, run_main, servers  # noqa: E402
from bench.report import median, percentile, print_machine, say, table  # noqa: E402
from bench.save_latency import http_round, reset, start_gunicorn  # noqa: E402


def off_cost_ns(n: int = 200_000) -> float:
    """Nanoseconds a save spends on tracing when it is off: its span and its traceparent, per save."""
    from pipeline import tracing
    assert not tracing.on()
    began = time.perf_counter_ns()
    for _ in range(n):
        with tracing.span("save", attributes={"content.id": None, "content.team": "default", "blocks": 20}):
            tracing.traceparent()
    return (time.perf_counter_ns() - began) / n


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=10, help="requests per client per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args(argv)
    from testkit import otlp
    collector = otlp.Receiver().start()
    try:
        with servers() as stack:
            print_machine(stack)
            token = editor_token(stack)
            env = stack.env(MAX_PENDING_TASKS="10000000")
            ports = {"tracing off": start_gunicorn(stack, "web:create_app()", "gunicorn-off", env),
                     "tracing on (OTLP/HTTP to a local receiver)": start_gunicorn(
                         stack, "web:create_app()", "gunicorn-on", {**env, "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url})}
            counter = iter(range(10**9))
            headers = {"Content-Type": "application/json", "X-API-Key": token}

            def run(port: int, requests: int):
                bodies = [[json.dumps(lesson(args.blocks, f"trace-{next(counter)}")).encode()
                           for _ in range(requests)] for _ in range(args.clients)]
                return http_round(port, "POST", "/api/contents", bodies, headers, 202)

            results: dict[str, list[float]] = {name: [] for name in ports}
            rates: dict[str, list[float]] = {name: [] for name in ports}
            with quiet_logs(stack.logs / "driver.log"):
                for port in ports.values():   # warm-up: every gunicorn worker imports and connects
                    run(port, 2)
                reset(stack)
                for rnd in range(args.rounds):
                    for name in (list(ports) if rnd % 2 == 0 else list(ports)[::-1]):
                        latencies, wall = run(ports[name], args.requests)
                        results[name] += latencies
                        rates[name].append(len(latencies) / wall)
                        reset(stack)
            deadline = time.monotonic() + 30   # the last batch leaves the on server within its 5 s schedule
            while time.monotonic() < deadline and not any(s.name == "save" for s in collector.spans()):
                time.sleep(0.2)
    finally:
        collector.stop()
    report(args, results, rates, collector, off_cost_ns())
    return 0


def report(args, results: dict[str, list[float]], rates: dict[str, list[float]], collector, off_ns: float) -> None:
    rows = [[name, len(lat), percentile(lat, 50) * 1000, percentile(lat, 90) * 1000, percentile(lat, 99) * 1000,
             median(rates[name])] for name, lat in results.items()]
    say()
    say(f"{args.clients} concurrent clients, {args.blocks}-block lesson, {args.rounds} rounds of {args.clients} x "
        f"{args.requests} requests per variant (latency in ms; requests/s: median over rounds):")
    say(table(["variant", "requests", "p50", "p90", "p99", "requests/s"], rows))
    off, on = results.values()
    saves = sum(1 for s in collector.spans() if s.name == "save")
    say()
    say(f"on / off: p50 {percentile(on, 50) / percentile(off, 50):.2f}x, p99 {percentile(on, 99) / percentile(off, 99):.2f}x"
        f" ({saves} save spans and {len(collector.spans())} spans in all reached the receiver in "
        f"{collector.requests} exports)")
    say(f"off, the save's tracing calls take {off_ns:.0f} ns a save: {off_ns / (percentile(off, 50) * 1e9) * 100:.4f} % "
        "of the off p50")


if __name__ == "__main__":
    run_main(main)
