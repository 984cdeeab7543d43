"""Lanes: an editor's lesson behind a bulk import, with and without call slots held back for editors,
and with the bulk lane paused; and what holding slots back costs the import.

Each configuration is a fresh `bin/dev` stack (the Procfile's lines) on this script's PostgreSQL and
Valkey, against the fake OpenAI-compatible providers of testkit/fakeprovider answering images in
`--image-latency` and speech in `--tts-latency` seconds, `--limit` calls at a time per provider:

* `held`: the defaults, one call slot per provider the bulk lane may not hold (*_INTERACTIVE_SLOTS=1),
  3 workers on both lanes and 1 on the interactive queue only, per provider;
* `shared`: *_INTERACTIVE_SLOTS=0 and *_WORKERS=4: the bulk lane may hold every slot and has a worker for
  each, as before slots were held back; the interactive-only worker is there too, and waits for a slot like
  any other (with the default `--limit` 4).

In each: the editor's lessons (`--blocks` blocks, and a one-block edit) alone; the makespan of an import
of `--import` lessons alone; then, while an import of `--backlog` lessons keeps the bulk lane's slots busy,
the same lessons behind it; then with the bulk lane paused (`bin/bulk pause`, once the bulk calls in flight
have ended), and resumed. Medians of `--repeats`, with every run's figure.

Usage: .venv/bin/python bench/lanes.py [--repeats 3] [--blocks 8] [--limit 4] [--import 20] [--backlog 120]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import stop_stack, Stack, run_main, servers  # noqa: E402
from bench.report import print_machine, say, table  # noqa: E402
from bench.makespan import alone, wait_peak  # noqa: E402
from bin.embedded import free_port  # noqa: E402
from testkit.stack import DevStack, fake_provider, lesson, provider_env  # noqa: E402

KEY_LIMITS = {"KEY_SAVES_PER_MINUTE": "100000", "KEY_MAX_PENDING_TASKS": "1000000"}   # one key saves it all
CONFIGS = {
    "held": {},
    "shared": {"IMAGE_INTERACTIVE_SLOTS": "0", "TTS_INTERACTIVE_SLOTS": "0", "IMAGE_WORKERS": "4", "TTS_WORKERS": "4"},
}


def bulk(stack: DevStack, *argv: str) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "bin" / "bulk"), *argv], env=stack.env, capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"bin/bulk {' '.join(argv)}: {done.stderr}")


def import_file(bench: Stack, name: str, lessons: int, blocks: int) -> Path:
    path = bench.base / f"{name}.jsonl"
    path.write_text("".join(json.dumps(lesson(blocks, f"{name}-{i}"), ensure_ascii=False) + "\n"
                            for i in range(lessons)))
    return path


def bulk_left(bench: Stack) -> tuple[int, float | None]:
    """Bulk tasks not finished yet, and when the last finished one ended."""
    with bench.db() as conn:
        row = conn.execute("SELECT count(*) FILTER (WHERE t.status IN ('ready', 'running', 'retry')) AS left, "
                           "max(t.updated_at) AS last FROM tasks t JOIN versions v ON v.content_id = t.content_id "
                           "AND v.version = t.version WHERE v.lane = 'bulk'").fetchone()
    return row["left"], row["last"].timestamp() if row["last"] else None


def makespan(bench: Stack, stack: DevStack, path: Path, timeout: float = 900) -> float:
    started = time.time()
    result = stack.run_import(path)
    if result.returncode != 0:
        raise RuntimeError(f"bin/import failed:\n{result.stderr[-3000:]}")
    deadline = time.monotonic() + timeout
    while (state := bulk_left(bench))[0]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the import was not done after {timeout} s")
        time.sleep(0.2)
    return state[1] - started


def idle(fake, endpoint: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while fake.in_flight(endpoint):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {endpoint} provider still had calls in flight after {timeout} s")
        time.sleep(0.02)


def run_config(bench: Stack, name: str, env: dict[str, str], args) -> dict:
    bench.use_database(f"lanes_{name}")
    bench.redis().flushdb()
    image, tts = fake_provider(args.image_latency), fake_provider(args.tts_latency)
    stack = DevStack.start(database_url=bench.database_url, redis_url=bench.redis_url,
                           media_dir=bench.base / f"media-{name}", port=free_port(), log=bench.logs / f"{name}.log",
                           **provider_env(image, tts, args.limit), **KEY_LIMITS, **env)
    figures: dict = {}
    try:
        stack.wait_ready()
        bulk_slots = stack.cfg.providers["image"].bulk_slots
        alone(stack, 2, f"{name}-warm-up")
        sizes = {"lesson": args.blocks, "edit": 1}

        def measure(phase: str, before=lambda: None) -> None:
            for what, blocks in sizes.items():
                runs = []
                for r in range(args.repeats):
                    before()
                    runs.append(alone(stack, blocks, f"{name}-{phase}-{what}-{r}")["total"])
                figures[(phase, what)] = runs
                say(f"  {name} {phase} {what}: {[round(t, 2) for t in runs]} s")

        measure("alone")
        figures["makespan"] = makespan(bench, stack, import_file(bench, f"{name}-import", args.imports, args.blocks))
        say(f"  {name} import of {args.imports} lessons alone: {figures['makespan']:.1f} s")
        result = stack.run_import(import_file(bench, f"{name}-backlog", args.backlog, args.blocks))
        if result.returncode != 0:
            raise RuntimeError(f"bin/import failed:\n{result.stderr[-3000:]}")
        measure("behind", lambda: wait_peak(image, "image", bulk_slots, timeout=300))
        bulk(stack, "pause", "--by", "bench/lanes.py")
        idle(image, "image")
        idle(tts, "audio")
        measure("paused")
        bulk(stack, "resume", "--by", "bench/lanes.py")
        figures["peak"] = f"{image.max_in_flight('image')} / {tts.max_in_flight('audio')}"
        figures["bulk_slots"] = bulk_slots
    finally:
        stop_stack(stack, image, tts)
    return figures


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/lanes.py")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--blocks", type=int, default=8, help="blocks of the editor's lesson and of each imported one")
    parser.add_argument("--limit", type=int, default=4, help="calls at a time per provider")
    parser.add_argument("--image-latency", type=float, default=1.0)
    parser.add_argument("--tts-latency", type=float, default=0.5)
    parser.add_argument("--import", dest="imports", type=int, default=20, help="lessons of the import timed alone")
    parser.add_argument("--backlog", type=int, default=120, help="lessons of the import the editor works behind")
    parser.add_argument("--configs", default="held,shared", help=f"comma separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args(argv)
    names = args.configs.split(",")
    if unknown := [n for n in names if n not in CONFIGS]:
        parser.error(f"unknown configuration {unknown}; choose from {', '.join(CONFIGS)}")
    with servers(keep=args.keep) as bench:
        print_machine(bench)
        say(f"providers: images {args.image_latency:g} s, speech {args.tts_latency:g} s, {args.limit} calls at a "
            f"time each; the editor's lesson {args.blocks} blocks, an edit 1 block; {args.repeats} repeats")
        results = {name: run_config(bench, name, CONFIGS[name], args) for name in names}
    rows = []
    for name, figures in results.items():
        for what in ("lesson", "edit"):
            base = statistics.median(figures[("alone", what)])
            row = [name, figures["bulk_slots"], what, base]
            for phase in ("behind", "paused"):
                runs = figures[(phase, what)]
                row += [statistics.median(runs), f"{statistics.median(runs) / base:.2f}x",
                        " / ".join(f"{t / base:.2f}" for t in runs)]
            rows.append(row)
    say(f"\n1. Save to every task done, s (median of {args.repeats}), against the same lesson alone:")
    say(table(["config", "bulk slots", "what", "alone", f"behind {args.backlog} bulk lessons", "ratio", "per run",
               "bulk paused", "ratio", "per run"], rows, digits=2))
    say(f"\n2. An import of {args.imports} lessons of {args.blocks} blocks alone, from bin/import's start to its "
        f"last task done:")
    base = results.get("shared", next(iter(results.values())))["makespan"]
    say(table(["config", "bulk slots", "makespan s", "vs shared", "peak calls image / speech, whole run"],
              [[name, f["bulk_slots"], f["makespan"], f"{f['makespan'] / base:.2f}x", f["peak"]]
               for name, f in results.items()], digits=1))
    return 0


if __name__ == "__main__":
    run_main(main)
