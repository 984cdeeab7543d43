#!/usr/bin/env python3
"""Save -> first provider call: how long after a save starts the first paid call of its version begins.

The Procfile's processes run for real: one SimpleWorker per queue (image, tts, bundle; the real
job and executor with the instant provider of bench/instant_worker.py, which logs the time of
every call) and the dispatcher (`bin/dispatch`). Three variants alternate, with a random pause
before each trial so the dispatcher's polling phase is sampled fairly:

* fast path: `versions.save`, then at once `dispatch.send_now` of its outbox rows (what the web
  process does after the commit); the dispatcher runs too;
* dispatcher alone: `versions.save` only; `bin/dispatch` finds the rows (it polls every 0.2 s when idle);
* plain RQ: 40 jobs enqueued straight into Redis (another database number), one worker per queue
  of the same class recording when each job starts.

Each trial waits until the version is done, so every trial starts with idle workers.

    .venv/bin/python bench/first_call_latency.py [--trials 20] [--blocks 20]
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import (BENCH, Stack, draft, quiet_logs, run_main, servers, wait_workers_idle,  # noqa: E402
                    worker_argv)
from bench.report import percentile, print_machine, say, table  # noqa: E402

STALL_SECONDS = 5.0


def calls_since(log: Path, offset: int) -> tuple[dict[str, float], int]:
    """Provider calls appended to the log after byte `offset`: key -> time of its first call."""
    with open(log, "rb") as handle:
        handle.seek(offset)
        data = handle.read()
    found: dict[str, float] = {}
    complete = data[:data.rfind(b"\n") + 1]
    for line in complete.decode().splitlines():
        at, key = line.split()
        found.setdefault(key, float(at))
    return found, offset + len(complete)


class Trials:
    def __init__(self, stack: Stack, blocks: int) -> None:
        from pipeline.core.records import idempotency_key
        self.stack, self.blocks, self.key = stack, blocks, idempotency_key
        self.cfg = stack.settings()
        self.conn = stack.db()
        self.redis = stack.redis()
        self.calls_log = stack.base / "calls.log"
        self.calls_log.touch()
        self.offset = 0
        self.n = 0

    def ours(self, fast_path: bool) -> dict:
        from pipeline import dispatch, versions
        self.n += 1
        d = draft(self.blocks, f"first-{self.n}")
        started = time.time()
        saved = versions.save(self.conn, d, self.cfg, by=BENCH, send_at_once=fast_path)
        committed = time.time()
        if fast_path:
            dispatch.send_now(self.conn, self.redis, saved.outbox_ids, claim_seconds=self.cfg.dispatch_claim_seconds)
        rows = self.conn.execute("SELECT id, fingerprint FROM tasks WHERE content_id = %s AND kind <> 'bundle'",
                                 (saved.content_id,)).fetchall()
        keys = {self.key(r["fingerprint"], r["id"]) for r in rows}
        called: dict[str, float] = {}
        deadline = time.monotonic() + 30
        while len(called) < len(keys):
            found, self.offset = calls_since(self.calls_log, self.offset)
            called.update({k: at for k, at in found.items() if k in keys and k not in called})
            if time.monotonic() > deadline or (called and time.time() - min(called.values()) > STALL_SECONDS):
                break
            time.sleep(0.005)
        if not called:
            raise RuntimeError(f"no provider call within 30 s; see {self.stack.logs}")
        lost = len(keys) - len(called)
        if lost:  # a message was lost: only bin/reconcile would re-send it (after LOST_DISPATCH_SECONDS)
            versions.cancel(self.conn, saved.content_id, saved.version, by=BENCH)
        self._wait_settled(saved.content_id)
        return {"first": min(called.values()) - started, "save": committed - started,
                "all": None if lost else max(called.values()) - started, "lost": lost}

    def _wait_settled(self, content_id: int) -> None:
        deadline = time.monotonic() + 60
        while self.conn.execute("SELECT count(*) FILTER (WHERE status IN ('ready', 'running', 'retry')) AS n "
                                "FROM tasks WHERE content_id = %s", (content_id,)).fetchone()["n"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"content {content_id} not settled within 60 s; see {self.stack.logs}")
            time.sleep(0.02)
        time.sleep(0.05)
        self.offset = calls_since(self.calls_log, self.offset)[1]

    def plain(self, conn_redis) -> dict:
        from rq import Queue
        self.n += 1
        conn_redis.delete("bench:started")
        keys = [f"{self.n}-{kind}-{i}" for i in range(self.blocks) for kind in ("image", "tts")]
        started = time.time()
        with conn_redis.pipeline() as pipe:
            for kind in ("image", "tts"):
                Queue(kind, connection=conn_redis).enqueue_many(
                    [Queue.prepare_data("bench.jobs.stamp", args=(k,), result_ttl=0) for k in keys if f"-{kind}-" in k],
                    pipeline=pipe)
            pipe.execute()
        enqueued = time.time()
        deadline = time.monotonic() + 30
        while conn_redis.hlen("bench:started") < len(keys):
            if time.monotonic() > deadline:
                raise RuntimeError("plain RQ jobs did not all start within 30 s")
            time.sleep(0.01)
        starts = [float(v) for v in conn_redis.hgetall("bench:started").values()]
        return {"first": min(starts) - started, "save": enqueued - started, "all": max(starts) - started, "lost": 0}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--blocks", type=int, default=20)
    args = parser.parse_args(argv)
    with servers() as stack:
        print_machine(stack)
        trials = Trials(stack, args.blocks)
        names = []
        for queue in ("image", "tts", "bundle"):
            name = f"first-{queue}"
            names.append(name)
            stack.spawn(name, worker_argv("engine", "simple", name, queues=[queue],
                                          extra=["--calls-log", str(trials.calls_log)]))
        plain_env = {**stack.env(), "REDIS_URL": stack.valkey.url(1)}
        plain_names = []
        for queue in ("image", "tts"):
            name = f"plain-{queue}"
            plain_names.append(name)
            stack.spawn(name, worker_argv("plain", "simple", name, queues=[queue]), plain_env)
        stack.spawn("dispatcher", [str(Path(__file__).resolve().parent.parent / "bin" / "dispatch")])
        wait_workers_idle(stack.redis(), names)
        plain_redis = redis.Redis.from_url(stack.valkey.url(1))
        wait_workers_idle(plain_redis, plain_names)
        variants = {"ours, fast path (send_now after the commit)": lambda: trials.ours(True),
                    "ours, dispatcher alone (bin/dispatch)": lambda: trials.ours(False),
                    "plain RQ: enqueue -> first job starts": lambda: trials.plain(plain_redis)}
        results: dict[str, list[dict]] = {name: [] for name in variants}
        rng = random.Random(8)
        with quiet_logs(stack.logs / "driver.log"):
            for name, run in variants.items():  # warm-up
                run()
            for i in range(args.trials):
                order = list(variants)
                rng.shuffle(order)
                for name in order:
                    time.sleep(rng.uniform(0.05, 0.35))
                    results[name].append(variants[name]())
        rows = []
        for name, values in results.items():
            ms = lambda key: [v[key] * 1000 for v in values if v[key] is not None]  # noqa: E731
            lost = [v["lost"] for v in values]
            rows.append([name, len(values), percentile(ms("save"), 50), percentile(ms("first"), 50),
                         percentile(ms("first"), 90), max(ms("first")), percentile(ms("all"), 50),
                         f"{sum(1 for x in lost if x)} ({sum(lost)} tasks)"])
        say()
        say(f"Save -> first provider call, {args.blocks}-block lesson ({2 * args.blocks} media tasks), "
            f"{args.trials} trials per variant (ms from the start of the save or enqueue):")
        say(table(["variant", "trials", "save (enqueue) p50", "first call p50", "first call p90", "first call max",
                   "all media calls started p50", "trials with a lost message"], rows))
        say(f"(a lost message: a task of the version not called {STALL_SECONDS:.0f} s after the first call; its "
            "message was consumed without a claim, see docs/performance.md. Such trials are cancelled and left out "
            "of 'all media calls started'.)")
        trials.conn.close()
    return 0


if __name__ == "__main__":
    run_main(main)
