"""Makespan: from save to every task done, on the stack the README starts, against the ideal.

The stack is `bin/dev`'s (`python -m bin.devstack`: the Procfile's own lines, so RQ worker pools
of SimpleWorkers sized to the providers' concurrency, the web app, the dispatcher, the
reconciler) on this script's PostgreSQL and Valkey. The providers are the fake OpenAI-compatible
HTTP servers of testkit/fakeprovider, one per kind, answering every call after a fixed latency
(2 s images, 1 s speech by default) and counting the calls in flight.

1. A lesson of N blocks, limit C calls at a time per provider: save (POST /api/contents) to the
   last task done, against the ideal ceil(N / C) x latency of the slower kind, and the providers'
   peak concurrent calls. Repeats per configuration; each configuration a fresh stack.
2. Resident memory of each process of the stack (RSS, and PSS / USS, which count pages shared
   after fork once), by role.
3. An editor's lesson saved behind a bulk backlog (`bin/import` of 50 lessons) against the same
   lesson alone; then a bulk lesson saved behind that backlog: how soon its first task starts
   (contents take turns) against the wait a FIFO queue would give it.

A configuration `12x4w1` pins the image and speech pools to one worker each (IMAGE_WORKERS,
TTS_WORKERS): the topology before worker pools, one worker process per queue.

Usage: .venv/bin/python bench/makespan.py [--configs 12x4w1,12x4,20x4,12x8] [--repeats 3] [--backlog 50]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import stop_stack, Stack, run_main, servers  # noqa: E402
from bench.report import print_machine, say, table  # noqa: E402
from bin.embedded import free_port  # noqa: E402
from testkit.stack import DevStack, descendants, fake_provider, ideal_seconds, lesson, provider_env  # noqa: E402
from pipeline.settings import ProviderSettings  # noqa: E402


def smaps(pid: int) -> dict[str, float]:
    """RSS, PSS and USS (private pages) of one process, MiB."""
    values = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1].isdigit():
            values[parts[0].rstrip(":")] = int(parts[1]) / 1024
    return {"rss": values.get("Rss", 0.0), "pss": values.get("Pss", 0.0),
            "uss": values.get("Private_Clean", 0.0) + values.get("Private_Dirty", 0.0)}


def cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def roles(stack: DevStack) -> dict[str, list[int]]:
    """The stack's processes by role, from the process tree under bin/dev."""
    found: dict[str, list[int]] = {}
    top = stack.proc.pid
    for pid in sorted(descendants(top)):
        try:
            line, up = cmdline(pid), parent(pid)
        except OSError:
            continue
        if "worker-pool" in line:
            words = line.split()
            kind = " ".join(words[words.index("-n") + 2:])
            depth = 0 if up == top else (1 if parent(up) == top else 2)
            role = [f"rq worker-pool ({kind})", f"RQ SimpleWorker ({kind})", "RQ scheduler (forked by a worker)"][depth]
        elif "gunicorn" in line:
            role = "gunicorn master" if up == top else "gunicorn worker"
        elif "bin/dispatch" in line:
            role = "dispatcher"
        elif "bin/reconcile" in line:
            role = "reconciler"
        else:
            continue
        found.setdefault(role, []).append(pid)
    return found


def wait_peak(fake, endpoint: str, at_least: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while fake.in_flight(endpoint) < at_least:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the {endpoint} provider never had {at_least} calls in flight")
        time.sleep(0.02)


def start(bench: Stack, name: str, limit: int, workers: int | None, image_latency: float, tts_latency: float):
    bench.use_database(name)
    bench.redis().flushdb()
    image, tts = fake_provider(image_latency), fake_provider(tts_latency)
    pinned = {"IMAGE_WORKERS": str(workers), "TTS_WORKERS": str(workers)} if workers else {}
    stack = DevStack.start(database_url=bench.database_url, redis_url=bench.redis_url,
                           media_dir=bench.base / f"media-{name}", port=free_port(), log=bench.logs / f"{name}.log",
                           **provider_env(image, tts, limit), **pinned)
    stack.wait_ready()
    return stack, image, tts


def alone(stack: DevStack, blocks: int, tag: str) -> dict:
    started, body = stack.save(lesson(blocks, tag))
    done = stack.wait_done(body["content_id"])
    assert done["statuses"] == ["succeeded"], done
    return {"total": done["ended"] - started, "media": done["media_ended"] - started}


def first_start(bench: Stack, content_id: int) -> float:
    with bench.db() as conn:
        row = conn.execute("SELECT min(e.at) AS at FROM events e WHERE e.content_id = %s AND e.to_status = 'running'",
                           (content_id,)).fetchone()
    return row["at"].timestamp() if row["at"] else float("nan")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/makespan.py")
    parser.add_argument("--configs", default="12x4w1,12x4,20x4,12x8",
                        help="BLOCKSxLIMIT[wWORKERS], comma separated (wWORKERS pins the image and speech pools)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--image-latency", type=float, default=2.0)
    parser.add_argument("--tts-latency", type=float, default=1.0)
    parser.add_argument("--backlog", type=int, default=50, help="bulk lessons in the backlog (0: skip part 3)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory (logs)")
    args = parser.parse_args(argv)
    configs = []
    for config in args.configs.split(","):
        blocks, rest = config.split("x")
        limit, _, workers = rest.partition("w")
        configs.append((int(blocks), int(limit), int(workers) if workers else None))
    main_config = next(c for c in configs if c[2] is None)   # parts 2 and 3 run on the first unpinned stack
    lat_i, lat_t = args.image_latency, args.tts_latency
    with servers(keep=args.keep) as bench:
        print_machine(bench)
        rows, memory, lanes_rows, turn_rows = [], None, [], []
        for blocks, limit, workers in configs:
            name = f"makespan_{blocks}x{limit}" + (f"w{workers}" if workers else "")
            stack, image, tts = start(bench, name, limit, workers, lat_i, lat_t)
            try:
                runs = [alone(stack, blocks, f"alone-{name}-{r}") for r in range(args.repeats)]
                ideal = ideal_seconds(blocks, limit, lat_i, lat_t)
                totals = [r["total"] for r in runs]
                pools = f"{workers or limit} / {workers or limit}"
                rows.append([blocks, limit, pools, f"{lat_i:g} s / {lat_t:g} s", ideal, statistics.median(totals),
                             f"{statistics.median(totals) / ideal:.2f}x",
                             " / ".join(f"{t / ideal:.2f}" for t in totals),
                             statistics.median(r["media"] for r in runs),
                             f"{image.max_in_flight('image')} / {tts.max_in_flight('audio')}"])
                say(f"  {name}: {[round(t, 2) for t in totals]} s (ideal {ideal} s)")
                if (blocks, limit, workers) == main_config:
                    memory = {role: [smaps(p) for p in pids] for role, pids in roles(stack).items()}
                if (blocks, limit, workers) == main_config and args.backlog:
                    lanes_rows, turn_rows = behind_backlog(bench, stack, image, tts, blocks, limit, args, totals)
            finally:
                stop_stack(stack, image, tts)
        say("\n1. Save to every task done (median of "
            f"{args.repeats}; ideal = ceil(blocks / limit) x the slower kind's latency):")
        say(table(["blocks", "limit C", "workers image / speech", "image / speech latency", "ideal s",
                   "save to all done s", "ratio",
                   "ratio per repeat", "media done s", "peak calls image / speech"], rows, digits=2))
        if memory:
            say(f"\n2. Resident memory per process of the stack, MiB (after the runs of {main_config[0]}x"
                f"{main_config[1]};"
                " PSS and USS count pages shared after fork once):")
            mem_rows = [[role, len(values), statistics.median(v["rss"] for v in values),
                         statistics.median(v["pss"] for v in values), statistics.median(v["uss"] for v in values)]
                        for role, values in sorted(memory.items())]
            say(table(["process", "count", "RSS median", "PSS median", "USS median"], mem_rows))
            workers = [v for role, values in memory.items() if "RQ SimpleWorker" in role for v in values]
            say(f"all {len(workers)} RQ SimpleWorkers: RSS {sum(v['rss'] for v in workers):,.0f} MiB, "
                f"PSS {sum(v['pss'] for v in workers):,.0f} MiB, USS {sum(v['uss'] for v in workers):,.0f} MiB")
        if lanes_rows:
            say(f"\n3. An editor's lesson ({main_config[0]} blocks, interactive) behind a bulk backlog of "
                f"{args.backlog} lessons, against the same lesson alone (part 1):")
            say(table(["editor's lesson", "runs", "save to all done s (median)", "per run", "vs alone"], lanes_rows,
                      digits=2))
            say(table(["bulk lesson saved behind the backlog", "value"], turn_rows, digits=1))
    return 0


def behind_backlog(bench: Stack, stack: DevStack, image, tts, blocks: int, limit: int, args, alone_totals):
    path = bench.base / "backlog.jsonl"
    path.write_text("".join(json.dumps(lesson(blocks, f"backlog-{i}"), ensure_ascii=False) + "\n"
                            for i in range(args.backlog)))
    started = time.monotonic()
    result = stack.run_import(path)
    imported = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"bin/import failed:\n{result.stderr[-3000:]}")
    say(f"  bin/import of {args.backlog} lessons: {imported:.1f} s")
    bulk = ProviderSettings(max_concurrency=limit).bulk_slots   # the bulk lane leaves editors their held-back slots
    wait_peak(image, "image", bulk)            # the image workers are busy with bulk work
    runs = []
    for r in range(args.repeats):
        wait_peak(image, "image", bulk)
        runs.append(alone(stack, blocks, f"editor-{r}")["total"])
    base = statistics.median(alone_totals)
    lanes_rows = [["alone (part 1)", len(alone_totals), base, " / ".join(f"{t:.2f}" for t in alone_totals), "1.00x"],
                  [f"behind {args.backlog} bulk lessons", len(runs), statistics.median(runs),
                   " / ".join(f"{t:.2f}" for t in runs), f"{statistics.median(runs) / base:.2f}x"]]
    # a bulk lesson saved now: how soon does its first task start?
    with bench.db() as conn:
        ahead = conn.execute("SELECT count(*) AS n FROM tasks t JOIN versions v ON v.content_id = t.content_id "
                             "AND v.version = t.version WHERE v.lane = 'bulk' AND t.kind = 'image' "
                             "AND t.status IN ('ready', 'retry')").fetchone()["n"]
    saved_at, body = stack.save(lesson(blocks, "late-bulk"), priority="bulk")
    deadline = time.monotonic() + 120
    first = first_start(bench, body["content_id"])
    while math.isnan(first) and time.monotonic() < deadline:
        time.sleep(0.1)
        first = first_start(bench, body["content_id"])
    fifo = ahead / (bulk / args.image_latency)
    turn_rows = [["bulk image tasks waiting ahead of it at its save", ahead],
                 ["its first task started after, s", first - saved_at],
                 ["a FIFO queue would start it after about, s (waiting ahead / (bulk slots / latency))", fifo],
                 ["peak concurrent calls image / speech, whole run", f"{image.max_in_flight('image')} / "
                                                                      f"{tts.max_in_flight('audio')}"]]
    return lanes_rows, turn_rows


if __name__ == "__main__":
    run_main(main)
