#!/usr/bin/env python3
"""A bulk import through the synchronous lane and through the Batch API lane, side by side in one run.

The same import (200 bulk blocks by default: `--lessons` lessons of `--blocks` blocks, saved with
`"priority": "bulk"`, one save per lesson as `bin/import` makes them) runs twice on fresh databases of one
PostgreSQL, against the fake OpenAI server (testkit/fakeprovider: GPT image answers with their `usage`; the
fake's batches complete `--batch-seconds` after they are created): once with IMAGE_BULK_BACKEND=sync, once with
IMAGE_BULK_BACKEND=batch (IMAGE_BATCH_GATHER_SECONDS=1, IMAGE_BATCH_POLL_SECONDS=0.5). The Procfile's processes
run for real (workers per kind, bin/dispatch, bin/batches). Each synchronous image call takes `--image-latency`
seconds at the fake.

Inputs repeat as in an import of a course: the last block of each lesson but the first repeats the first block
of the lesson before (`--no-repeats`: every block its own input), so 20 lessons of 10 blocks make 181 distinct
image inputs. A repeated block's task waits for the one that makes the input, however long its batch takes, and
reuses its asset.

Printed per lane: the lessons delivered (every task of the lesson succeeded, the bundle made), the delivered
images and distinct image inputs, the paid image calls (provider executions, from the fake's counters) and, in
the batch lane, the batch lines, each per distinct input; the image cost booked in the ledger per delivered
image (priced from the table for the image model printed in the header), the batch / sync ratio of that cost,
and the seconds from the first save to every bundle delivered. The batch lane's time is dominated by the
provider's batch turnaround, which is up to 24 h at OpenAI; the fake's is `--batch-seconds`. Exit 0 when both
lanes delivered every lesson with one paid call per distinct input.

    .venv/bin/python bench/batch_import.py [--quick] [--lessons 20] [--blocks 10] [--batch-seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import BENCH, run_main, servers  # noqa: E402
from bench.report import fmt, print_machine, say, table  # noqa: E402
from pipeline import versions  # noqa: E402
from pipeline.core.content import parse_draft  # noqa: E402
from pipeline.core.records import idempotency_key  # noqa: E402
from testkit.fakeprovider import Behaviour, FakeProviderServer  # noqa: E402
from testkit.system import rq_worker_argv  # noqa: E402

# The image model of both lanes, the one place this benchmark names it: None runs the settings' default
# IMAGE_MODEL (a live model the price table knows); a name here is passed as IMAGE_MODEL to every process.
IMAGE_MODEL: str | None = None

QUICK = {"lessons": 4, "blocks": 5, "batch_seconds": 2.0, "image_latency": 0.2}   # --quick, about a minute


def lessons(n: int, blocks: int, repeats: bool) -> list[dict]:
    """The import's bodies: block j of lesson i has its own text, except that the last block of each lesson after
    the first repeats the first block of the lesson before."""
    texts = [[f"Chapter {i}, page {j}: a lake at dawn." for j in range(blocks)] for i in range(n)]
    if repeats and blocks > 1:
        for i in range(1, n):
            texts[i][-1] = texts[i - 1][0]
    return [{"title": f"Book {i}", "locale": "en-US",
             "blocks": [{"key": f"b{j}", "text": text} for j, text in enumerate(texts[i])]} for i in range(n)]


def lane_env(stack, fake, backend: str) -> dict[str, str]:
    model = {"IMAGE_MODEL": IMAGE_MODEL} if IMAGE_MODEL else {}
    return stack.env(IMAGE_PROVIDER="openai", IMAGE_BASE_URL=fake.base_url, IMAGE_API_KEY="sk-bench",
                     IMAGE_DAILY_BUDGET="unlimited", TTS_PROVIDER="local", IMAGE_BULK_BACKEND=backend,
                     IMAGE_BATCH_GATHER_SECONDS="1", IMAGE_BATCH_POLL_SECONDS="0.5", IMAGE_MAX_CONCURRENCY="8",
                     MAX_PENDING_TASKS="100000", **model)


def run_lane(stack, fake, backend: str, bodies: list[dict], args) -> dict:
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
        for body in bodies:
            versions.save(conn, parse_draft(body), cfg, by=BENCH, lane="bulk")
        deadline = time.monotonic() + args.time_limit
        while time.monotonic() < deadline:
            left = conn.execute("SELECT count(*)::int AS n FROM tasks WHERE kind = 'bundle' AND status <> 'succeeded'"
                                ).fetchone()["n"]
            if left == 0:
                break
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        tasks = conn.execute("SELECT id, fingerprint, status::text AS status FROM tasks WHERE kind = 'image'"
                             ).fetchall()
        cost = conn.execute("SELECT coalesce(sum(cost), 0)::float AS c, count(*)::int AS n FROM provider_calls "
                            "WHERE provider = 'openai-image' AND outcome = 'succeeded'").fetchone()
        delivered = conn.execute("SELECT count(*)::int AS n FROM contents c WHERE NOT EXISTS (SELECT 1 FROM tasks t "
                                 "WHERE t.content_id = c.id AND t.status <> 'succeeded')").fetchone()["n"]
        lines = conn.execute("SELECT count(*)::int AS n, count(DISTINCT fingerprint)::int AS inputs "
                             "FROM batch_lines").fetchone()
    stack.stop_all()
    executions = sum(fake.calls_for(idempotency_key(t["fingerprint"], t["id"])).executions for t in tasks)
    inputs = len({t["fingerprint"] for t in tasks})
    images = sum(t["status"] == "succeeded" for t in tasks)
    return {"lane": backend, "lessons": delivered, "images": images, "failed": sum(t["status"] == "failed"
                                                                                  for t in tasks),
            "inputs": inputs, "calls": executions, "lines": lines["n"] if backend == "batch" else None,
            "cost_per_image": cost["c"] / max(1, images), "seconds": elapsed, "model": cfg.providers["image"].model,
            "done": left == 0 and delivered == len(bodies) and executions == inputs
            and (backend != "batch" or lines["n"] == lines["inputs"] == inputs)}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"a small import: {QUICK}")
    parser.add_argument("--lessons", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--no-repeats", dest="repeats", action="store_false",
                        help="no block repeats the first block of the lesson before")
    parser.add_argument("--image-latency", type=float, default=0.5, help="seconds per synchronous image call")
    parser.add_argument("--batch-seconds", type=float, default=5.0, help="the fake batch's turnaround")
    parser.add_argument("--time-limit", type=float, default=600)
    args = parser.parse_args(argv)
    if args.quick:
        vars(args).update(QUICK)
    bodies = lessons(args.lessons, args.blocks, args.repeats)
    with servers() as stack, FakeProviderServer() as fake:
        print_machine(stack)
        say(f"import: {args.lessons} lessons x {args.blocks} blocks = {args.lessons * args.blocks} bulk images"
            f"{', the last block of each lesson repeating the first of the one before' if args.repeats else ''}; "
            f"sync image latency {args.image_latency} s, batch turnaround {args.batch_seconds} s")
        results = [run_lane(stack, fake, backend, bodies, args) for backend in ("sync", "batch")]
    sync, batch = results
    say(f"image model: {sync['model']} (IMAGE_MODEL {'set in the bench' if IMAGE_MODEL else 'default'})")
    say(table(["lane", "lessons delivered", "images delivered", "images failed", "distinct inputs",
               "paid image calls", "batch lines", "image cost per image ($)", "s to all delivered"],
              [[r["lane"], f"{r['lessons']} / {len(bodies)}", r["images"], r["failed"], r["inputs"], r["calls"],
                "-" if r["lines"] is None else r["lines"], fmt(r["cost_per_image"], 4), fmt(r["seconds"], 1)]
               for r in results]))
    say(f"batch lines per distinct input: {fmt(batch['lines'] / max(1, batch['inputs']), 2)}; "
        f"image cost per delivered image, batch / sync: "
        f"{fmt(batch['cost_per_image'] / sync['cost_per_image'], 2) if sync['cost_per_image'] else 'n/a'}")
    return 0 if sync["done"] and batch["done"] else 1


if __name__ == "__main__":
    run_main(main)
