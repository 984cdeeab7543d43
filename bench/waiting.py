"""Waiting for a call slot: what tasks cost while every slot is taken, and after.

On the stack the README starts (`bin/dev`, the Procfile's lines) on this script's PostgreSQL and Valkey, with
fake providers answering after `--latency` seconds and `--limit` calls at a time each: every call slot of both
providers is taken by holders that are not there (as a killed worker's are) for `--hold` seconds, then
`--lessons` lessons of `--blocks` blocks are saved (half their tasks images, half speech). When the holds run
out the tasks run. Counted from the events and the providers: claims (a task taken for an attempt), claims
that found no slot (`busy`), slots freed (the held slots running out, and every call's end), and the time
from the last save to the last task done.

Run it on another checkout (a commit before) by copying this file there: it measures the code it sits in.

Usage: .venv/bin/python bench/waiting.py [--lessons 50] [--blocks 5] [--limit 4] [--hold 30] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import stop_stack, run_main, servers  # noqa: E402
from bench.report import print_machine, say, table  # noqa: E402
from bin.embedded import free_port  # noqa: E402
from testkit.stack import DevStack, fake_provider, lesson, provider_env  # noqa: E402

KEY_LIMITS = {"KEY_SAVES_PER_MINUTE": "100000", "KEY_MAX_PENDING_TASKS": "1000000"}


def counts(conn) -> dict:
    return conn.execute(
        "SELECT count(*) FILTER (WHERE reason = 'claimed') AS claims, "
        "count(*) FILTER (WHERE to_status = 'retry' AND details->>'error_class' IN ('Busy', 'SlotsBusy')) AS busy, "
        "count(*) FILTER (WHERE to_status = 'succeeded') AS succeeded FROM events").fetchone()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/waiting.py")
    parser.add_argument("--lessons", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=5)
    parser.add_argument("--limit", type=int, default=4, help="call slots per provider")
    parser.add_argument("--hold", type=float, default=30.0, help="seconds every slot stays taken")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds per provider call")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args(argv)
    with servers(keep=args.keep) as bench:
        print_machine(bench)
        image, tts = fake_provider(args.latency), fake_provider(args.latency)
        stack = DevStack.start(database_url=bench.database_url, redis_url=bench.redis_url,
                               media_dir=bench.base / "media", port=free_port(), log=bench.logs / "waiting.log",
                               **provider_env(image, tts, args.limit), **KEY_LIMITS)
        try:
            stack.wait_ready()
            stack.wait_done(stack.save(lesson(1, "warm-up"))[1]["content_id"])
            with bench.db() as conn:
                before = counts(conn)
                providers = [r["provider"] for r in conn.execute("SELECT DISTINCT provider FROM provider_slots")]
                held = conn.execute(
                    "UPDATE provider_slots SET holder = gen_random_uuid(), "
                    "held_until = now() + make_interval(secs => %s) WHERE slot <= %s RETURNING provider",
                    (args.hold, args.limit)).fetchall()
            say(f"held {len(held)} slots of {', '.join(sorted(providers))} for {args.hold:g} s")
            held_at = time.monotonic()
            ids = [stack.save(lesson(args.blocks, f"waiting-{i}"))[1]["content_id"] for i in range(args.lessons)]
            saved_at = time.time()
            tasks = args.lessons * (2 * args.blocks + 1)
            say(f"saved {args.lessons} lessons ({tasks} tasks) in {time.monotonic() - held_at:.1f} s")
            during = None
            for content_id in ids:
                if during is None and time.monotonic() - held_at >= args.hold - 1:
                    with bench.db() as conn:
                        during = counts(conn)
                stack.wait_done(content_id, timeout=args.hold + 600)
            ended = max(stack.wait_done(content_id)["ended"] for content_id in ids)
            with bench.db() as conn:
                after = counts(conn)
            during = during or after
        finally:
            stop_stack(stack, image, tts)
    claims = after["claims"] - before["claims"]
    busy = after["busy"] - before["busy"]
    calls = after["succeeded"] - before["succeeded"] - args.lessons   # each media task's call; bundles call nothing
    freed = calls + len(held)
    media = args.lessons * 2 * args.blocks
    say(table(["figure", "value"], [
        ["tasks saved (images, speech, bundles)", tasks],
        ["claims, whole run", claims],
        ["claims that found every slot taken (busy), whole run", busy],
        ["busy claims while the slots were held (first ~hold s)", during["busy"] - before["busy"]],
        ["slots freed (held slots running out + calls ended)", freed],
        ["claims of media tasks per slot freed", f"{(claims - args.lessons) / freed:.2f}"],
        ["  the same, less each task's first claim", f"{(claims - args.lessons - media) / freed:.2f}"],
        ["last save to last task done, s", ended - saved_at],
    ], digits=1))
    return 0


if __name__ == "__main__":
    run_main(main)
