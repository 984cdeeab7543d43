#!/usr/bin/env python3
"""A bulk import through the synchronous lane and through the Batch API lane, side by side in one run.

The same import (200 bulk blocks by default: `--lessons` lessons of `--blocks` blocks, saved with
`"priority": "bulk"`) runs twice on fresh databases of one PostgreSQL, against the fake OpenAI server
(testkit/fakeprovider: GPT image answers with their `usage`; the fake's batches complete
`--batch-seconds` after they are created): once with IMAGE_BULK_BACKEND=sync, once with
IMAGE_BULK_BACKEND=batch (IMAGE_BATCH_GATHER_SECONDS=1, IMAGE_BATCH_POLL_SECONDS=0.5). The
Procfile's processes run for real (workers per kind, bin/dispatch, bin/batches). Each synchronous
image call takes `--image-latency` seconds at the fake.

Printed per lane: provider executions per distinct image input (from the fake's counters), the image
cost booked in the ledger per delivered image, the batch ÷ sync ratio of that cost (the default price
table: gpt-image-1, quality auto priced as high), and the seconds from the first save to every bundle
delivered. The batch lane's time is dominated by the provider's batch turnaround, which is up to 24 h
at OpenAI; the fake's is `--batch-seconds`.

    .venv/bin/python bench/batch_import.py [--lessons 20] [--blocks 10] [--batch-seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import fmt, print_machine, run_main, say, servers, table  # noqa: E402
from pipeline import versions  # noqa: E402
from pipeline.core.content import parse_draft  # noqa: E402
from pipeline.core.records import idempotency_key  # noqa: E402
from testkit.fakeprovider import Behaviour, FakeProviderServer  # noqa: E402
from testkit.system import rq_worker_argv  # noqa: E402


def lane_env(stack, fake, backend: str) -> dict[str, str]:
    return stack.env(IMAGE_PROVIDER="openai", IMAGE_BASE_URL=fake.base_url, IMAGE_API_KEY="sk-bench",
                     IMAGE_DAILY_BUDGET="unlimited", TTS_PROVIDER="local", IMAGE_BULK_BACKEND=backend,
                     IMAGE_BATCH_GATHER_SECONDS="1", IMAGE_BATCH_POLL_SECONDS="0.5", IMAGE_MAX_CONCURRENCY="8",
                     MAX_PENDING_TASKS="100000")


def run_lane(stack, fake, backend: str, args) -> dict:
    stack.use_database(f"bench_{backend}")
    fake.reset()
    fake.set_default(Behaviour("delay", seconds=args.image_latency))
    fake.batch.script.seconds = args.batch_seconds
    env = lane_env(stack, fake, backend)
    for kind, n in (("image", 8), ("tts", 2), ("bundle", 1)):
        for i in range(n):
            stack.spawn(f"{backend}-{kind}-{i}", rq_worker_argv(kind), env)
    stack.spawn(f"{backend}-dispatch", [str(ROOT / "bin" / "dispatch")], env)
    stack.spawn(f"{backend}-batches", [str(ROOT / "bin" / "batches")], env)
    cfg = stack.settings(**{k: v for k, v in env.items() if k not in stack.env()})
    started = time.monotonic()
    with stack.db() as conn:
        for i in range(args.lessons):
            body = {"title": f"Book {i}", "locale": "en-US",
                    "blocks": [{"key": f"b{j}", "text": f"Chapter {i}, page {j}: a lake at dawn."}
                               for j in range(args.blocks)]}
            versions.save(conn, parse_draft(body), cfg, actor="import", lane="bulk")
        deadline = time.monotonic() + args.time_limit
        while time.monotonic() < deadline:
            left = conn.execute("SELECT count(*)::int AS n FROM tasks WHERE kind = 'bundle' AND status <> 'succeeded'"
                                ).fetchone()["n"]
            if left == 0:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        tasks = conn.execute("SELECT id, fingerprint FROM tasks WHERE kind = 'image'").fetchall()
        cost = conn.execute("SELECT coalesce(sum(cost), 0)::float AS c, count(*)::int AS n FROM provider_calls "
                            "WHERE provider = 'openai-image' AND outcome = 'succeeded'").fetchone()
        delivered = conn.execute("SELECT count(*)::int AS n FROM tasks WHERE kind = 'image' AND status = 'succeeded'"
                                 ).fetchone()["n"]
    stack.stop_all()
    executions = sum(fake.calls_for(idempotency_key(t["fingerprint"], t["id"])).executions for t in tasks)
    inputs = len({t["fingerprint"] for t in tasks})
    return {"lane": backend, "images": delivered, "inputs": inputs, "calls_per_input": executions / inputs,
            "cost_per_image": cost["c"] / max(1, delivered), "seconds": elapsed, "done": left == 0}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lessons", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--image-latency", type=float, default=0.5, help="seconds per synchronous image call")
    parser.add_argument("--batch-seconds", type=float, default=5.0, help="the fake batch's turnaround")
    parser.add_argument("--time-limit", type=float, default=600)
    args = parser.parse_args(argv)
    with servers() as stack, FakeProviderServer() as fake:
        print_machine(stack)
        say(f"import: {args.lessons} lessons x {args.blocks} blocks = {args.lessons * args.blocks} bulk images; "
            f"sync image latency {args.image_latency} s, batch turnaround {args.batch_seconds} s")
        results = [run_lane(stack, fake, backend, args) for backend in ("sync", "batch")]
    sync, batch = results
    say(table(["lane", "delivered images", "distinct inputs", "calls per input", "image cost per image ($)",
               "s to all delivered"],
              [[r["lane"], r["images"], r["inputs"], fmt(r["calls_per_input"], 2), fmt(r["cost_per_image"], 4),
                fmt(r["seconds"], 1)] for r in results]))
    say(f"image cost per delivered image, batch / sync: {fmt(batch['cost_per_image'] / sync['cost_per_image'], 2)}")
    return 0 if sync["done"] and batch["done"] else 1


if __name__ == "__main__":
    run_main(main)
