#!/usr/bin/env python3
"""Wasted paid calls: provider executions per delivered asset under the same fault mix, through our
pipeline and through a naive RQ pipeline, in one run.

The provider is the fake OpenAI-compatible HTTP server of testkit/fakeprovider, which counts
executions per idempotency key. Faults, the same for both pipelines:
* ambiguous read timeouts: each request that reaches the provider is, with probability 10 %
  (seeded, by request number, so both pipelines get the same sequence), executed and then left
  unanswered past the client's read timeout; every other request is answered after 50 ms;
* connection refusals: each new connection to the provider is refused (ECONNREFUSED) with
  probability 10 %, by an iptables rule on the fake's port (added and removed by this script; when
  not root or iptables is missing, the provider instead stops listening 0.1 s in every second); the
  realised number of refused attempts is printed for each side;
* two worker SIGKILLs: once 30 % and once 60 % of the planned calls have been executed, the worker
  whose call is in flight at that moment is killed (its whole process group), and a new one started.

Ours: the Procfile's processes for real (one `rq worker -w bin.worker.Worker` per kind, `bin/dispatch`,
`bin/reconcile --loop 1`), saves with the fast path, the HTTP adapters of providers/openai_http.py.
Unknown outcomes wait for a person: at the end an editor accepts the duplicate risk for each one
(`review.retry(..., accept_duplicate_risk=True)`, recorded as an event) until none is left.
Naive: one RQ job per asset, `Retry(max=3)`, calling the same adapter (bench/jobs.py), SimpleWorkers
per queue. A killed worker's job is retried by RQ as abandoned once its registry entry expires
(up to 4 minutes); the bench moves RQ's clock forward instead of waiting
(`StartedJobRegistry.cleanup(now + 1 h)` once the live workers are idle and the queues empty).

Timeouts are short so the run is short: read timeout 1 s, lease 3 s (heartbeat 0.5 s), a lost
message is re-sent after 3 s (LOST_DISPATCH_SECONDS); the retry backoff keeps its defaults (1 s base,
full jitter).

    .venv/bin/python bench/wasted_calls.py [--lessons 10] [--blocks 10] [--seed 6] [--refusals auto]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import (BENCH, Stack, draft, quiet_logs, run_main, servers, wait_workers_idle,  # noqa: E402
                    worker_argv)
from bench.report import print_machine, say, table  # noqa: E402
from testkit.fakeprovider import Behaviour, FakeProviderServer  # noqa: E402
from testkit.system import rq_worker_argv  # noqa: E402

AMBIGUOUS_SHARE = 0.10
REFUSE_SHARE = 0.10
ANSWER_SECONDS = 0.05
READ_TIMEOUT = 1.0
KILL_AT = (0.30, 0.60)
ENDPOINT_OF = {"image": "image", "tts": "audio"}


def script(fake: FakeProviderServer, requests: int, seed: int) -> int:
    rng = random.Random(seed)
    behaviours = [Behaviour("hang", seconds=READ_TIMEOUT + 1.0) if rng.random() < AMBIGUOUS_SHARE
                  else Behaviour("delay", seconds=ANSWER_SECONDS) for _ in range(requests)]
    fake.script(*behaviours)
    fake.set_default(Behaviour("delay", seconds=ANSWER_SECONDS))
    return sum(1 for b in behaviours if b.action == "hang")


class FirewallRefusals:
    """Each new connection to the provider is refused (TCP RST to its SYN: ECONNREFUSED) with probability
    REFUSE_SHARE, by an iptables rule on 127.0.0.1:port that is removed afterwards."""

    method = "per connection (iptables statistic match)"

    def __init__(self, port: int) -> None:
        self.rule = ["INPUT", "-p", "tcp", "-d", "127.0.0.1", "--dport", str(port), "--syn", "-m", "statistic",
                     "--mode", "random", "--probability", str(REFUSE_SHARE), "-j", "REJECT", "--reject-with",
                     "tcp-reset"]

    @staticmethod
    def available() -> bool:
        return os.geteuid() == 0 and shutil.which("iptables") is not None

    def start(self) -> None:
        subprocess.run(["iptables", "-I", *self.rule], check=True, capture_output=True, timeout=10)

    def stop(self) -> None:
        subprocess.run(["iptables", "-D", *self.rule], capture_output=True, timeout=10)


class WindowRefusals:
    """Without iptables: the provider stops listening for 0.1 s at a seeded moment of every second."""

    method = "10 % of the time (0.1 s per second without a listener)"

    def __init__(self, fake: FakeProviderServer, seed: int) -> None:
        self.fake, self.seed = fake, seed
        self._stop = threading.Event()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        rng = random.Random(self.seed + 1)
        while not self._stop.is_set():
            offset = rng.uniform(0, 1.0 - 0.1)
            if self._stop.wait(offset):
                return
            self.fake.refuse_connections(0.1)
            self._stop.wait(1.0 - offset)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.fake.accept_connections()


@dataclass
class Chaos:
    """Connection refusals while a pipeline runs, and the two kills."""

    fake: FakeProviderServer
    planned: int
    seed: int
    method: str = "auto"
    kills: list[str] = field(default_factory=list)

    def start(self) -> None:
        use_firewall = self.method == "iptables" or (self.method == "auto" and FirewallRefusals.available())
        self.refusals = FirewallRefusals(self.fake.port) if use_firewall else WindowRefusals(self.fake, self.seed)
        self.refusals.start()

    def stop(self) -> None:
        self.refusals.stop()

    def __enter__(self) -> "Chaos":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def maybe_kill(self, stack: Stack, workers: dict, respawn) -> None:
        """Kill the worker whose call is in flight once the next threshold of executions is reached."""
        if len(self.kills) >= len(KILL_AT):
            return
        if self.fake.stats()["executions_total"] < KILL_AT[len(self.kills)] * self.planned:
            return
        for queue, endpoint in ENDPOINT_OF.items():
            if self.fake.in_flight(endpoint):
                stack.kill(workers[queue])
                workers[queue] = respawn(queue)
                self.kills.append(queue)
                return


def key_for(tag: str) -> str:
    return hashlib.sha256(tag.encode()).hexdigest()[:48]


# -- ours --------------------------------------------------------------------------------------------

def ours_env(stack: Stack, fake: FakeProviderServer) -> dict[str, str]:
    provider = {"PROVIDER": "openai", "DAILY_BUDGET": "unlimited", "BASE_URL": fake.base_url, "READ_TIMEOUT": str(READ_TIMEOUT),
                "CONNECT_TIMEOUT": "1"}
    env = stack.env(LEASE_SECONDS="3", HEARTBEAT_SECONDS="0.5", DISPATCH_CLAIM_SECONDS="2", LOST_DISPATCH_SECONDS="3",
                    IMAGE_API_KEY="sk-bench-image", TTS_API_KEY="sk-bench-tts",
                    TTS_VOICE="alloy")
    for prefix in ("IMAGE", "TTS"):
        env.update({f"{prefix}_{k}": v for k, v in provider.items()})
    return env


def _waste(executions: dict[str, int], delivered: set[str], accepted: set[str]) -> dict[str, int]:
    """Split the executions per key: repeats on delivered keys (accepted or silent), all executions of the rest."""
    split = {"extra_accepted": 0, "extra_other": 0, "undelivered": 0}
    for key, n in executions.items():
        if key not in delivered:
            split["undelivered"] += n
        elif key in accepted:
            split["extra_accepted"] += n - 1
        else:
            split["extra_other"] += n - 1
    return split


def run_ours(stack: Stack, fake: FakeProviderServer, args, planned: int) -> dict:
    from pipeline import dispatch, settings, versions
    stack.use_database("wasted_ours")
    stack.redis().flushdb()
    env = ours_env(stack, fake)
    cfg = settings.load(env)
    counter = iter(range(1000))

    def respawn(queue: str):
        return stack.spawn(f"ours-{queue}-{next(counter)}", rq_worker_argv(queue), env)
    workers = {queue: respawn(queue) for queue in ("image", "tts", "bundle")}
    stack.spawn("ours-dispatcher", [str(ROOT / "bin" / "dispatch")], env)
    stack.spawn("ours-reconciler", [str(ROOT / "bin" / "reconcile"), "--loop", "1"], env)
    _wait_idle_workers(stack, 3)
    with Chaos(fake, planned, args.seed, args.refusals) as chaos, stack.db() as conn, \
            quiet_logs(stack.logs / "driver-ours.log"):
        started = time.monotonic()
        for i in range(args.lessons):
            saved = versions.save(conn, draft(args.blocks, f"wasted-{i}"), cfg, by=BENCH)
            dispatch.send_now(conn, stack.redis(), saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
        accepted, before = _drive_ours(stack, conn, cfg, chaos, lambda: chaos.maybe_kill(stack, workers, respawn))
        seconds = time.monotonic() - started
    result = _collect_ours(stack, fake)
    for proc in list(stack.procs):
        stack.stop(proc)
    return {**result, "who": "ours", "kills": chaos.kills, "refusals": chaos.refusals.method, "accepted": accepted,
            "seconds": seconds, "before": before}


def _wait_idle_workers(stack: Stack, count: int) -> None:
    from rq import Worker
    deadline = time.monotonic() + 60
    while sum(1 for w in Worker.all(connection=stack.redis()) if w.state == "idle") < count:
        if time.monotonic() > deadline:
            raise RuntimeError(f"our workers did not start; see {stack.logs}")
        time.sleep(0.05)


def _drive_ours(stack: Stack, conn, cfg, chaos: Chaos, kill) -> tuple[int, dict]:
    """Until every media task is finished: kill on schedule; then an editor accepts each unknown outcome.

    Returns the number of acceptances and what stood before the first one (delivered, unknown, executions)."""
    from pipeline import dispatch, review
    accepted, started, before = 0, time.monotonic(), {}
    while True:
        kill()
        rows = conn.execute("SELECT id, status FROM tasks WHERE kind <> 'bundle'").fetchall()
        waiting = [r for r in rows if r["status"] in ("ready", "running", "retry")]
        unknown = [r for r in rows if r["status"] == "unknown"]
        if not waiting and len(chaos.kills) == len(KILL_AT):
            if not before:
                before = {"delivered": sum(1 for r in rows if r["status"] == "succeeded"), "unknown": len(unknown),
                          "executions": chaos.fake.stats()["executions_total"]}
            if not unknown:
                return accepted, before
            for row in unknown:  # "retry, I accept a possible duplicate charge", recorded with who and when
                reopened = review.retry(conn, row["id"], cfg, by=BENCH, accept_duplicate_risk=True)
                dispatch.send_now(conn, stack.redis(), reopened.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
                accepted += 1
        elif not waiting and not unknown:
            raise RuntimeError("all calls done before both kills; use more lessons (--lessons)")
        if time.monotonic() - started > 240:
            raise RuntimeError(f"our pipeline did not finish within 240 s; see {stack.logs}")
        time.sleep(0.05)


def _collect_ours(stack: Stack, fake: FakeProviderServer) -> dict:
    from pipeline.core.records import idempotency_key
    with stack.db() as conn:
        tasks = conn.execute("SELECT id, fingerprint, status FROM tasks WHERE kind <> 'bundle'").fetchall()
        accepted_ids = {r["task_id"] for r in conn.execute(
            "SELECT task_id FROM events WHERE action = 'duplicate_risk_accepted'").fetchall()}
        ledger = {r["outcome"]: r["n"] for r in conn.execute(
            "SELECT outcome, count(*) AS n FROM provider_calls GROUP BY outcome").fetchall()}
    stats = fake.stats()
    key = {row["id"]: idempotency_key(row["fingerprint"], row["id"]) for row in tasks}
    executions = {key[r["id"]]: stats["keys"].get(key[r["id"]], {}).get("executions", 0) for r in tasks}
    delivered = {key[r["id"]] for r in tasks if r["status"] == "succeeded"}
    return {"executions": stats["executions_total"], "delivered": len(delivered), "planned": len(tasks),
            "failed": sum(1 for r in tasks if r["status"] == "failed"), "refused": ledger.get("transient", 0),
            "ambiguous": ledger.get("ambiguous", 0),
            **_waste(executions, delivered, {key[i] for i in accepted_ids if i in key})}


# -- naive -------------------------------------------------------------------------------------------

def run_naive(stack: Stack, fake: FakeProviderServer, args, planned: int) -> dict:
    import redis
    from rq import Queue, Retry
    url = stack.valkey.url(2)
    conn_redis = redis.Redis.from_url(url)
    conn_redis.flushdb()
    env = {**stack.env(), "REDIS_URL": url, "NAIVE_BASE_URL": fake.base_url, "NAIVE_READ_TIMEOUT": str(READ_TIMEOUT),
           "NAIVE_CONNECT_TIMEOUT": "1", "NAIVE_MEDIA_DIR": str(stack.base / "naive-media")}
    counter = iter(range(1000))
    names: dict[str, str] = {}

    def respawn(queue: str):
        name = names[queue] = f"naive-{queue}-{next(counter)}"
        return stack.spawn(name, worker_argv("plain", "simple", name, queues=[f"naive-{queue}"]), env)
    workers = {queue: respawn(queue) for queue in ("image", "tts")}
    wait_workers_idle(conn_redis, names.values())
    queues = {queue: Queue(f"naive-{queue}", connection=conn_redis) for queue in ("image", "tts")}
    with Chaos(fake, planned, args.seed, args.refusals) as chaos:
        started = time.monotonic()
        for i in range(args.lessons):
            for block in draft(args.blocks, f"wasted-{i}").blocks:
                for queue, kind in (("image", "image"), ("tts", "audio")):
                    queues[queue].enqueue("bench.jobs.naive_generate", kind, block.text,
                                          key_for(f"{i}-{block.key}-{kind}"), retry=Retry(max=3))
        _drive_naive(stack, conn_redis, fake, queues, names, chaos, lambda: chaos.maybe_kill(stack, workers, respawn))
        seconds = time.monotonic() - started
    errors = {k.decode(): int(v) for k, v in conn_redis.hgetall("naive:errors").items()}
    delivered = {k.decode() for k in conn_redis.hkeys("naive:delivered")}
    executions = {k: v["executions"] for k, v in fake.stats()["keys"].items()}
    from rq.registry import FailedJobRegistry
    failed = sum(FailedJobRegistry(q.name, connection=conn_redis).count for q in queues.values())
    for proc in list(stack.procs):
        stack.stop(proc)
    return {"who": "naive RQ, Retry(max=3)", "executions": fake.stats()["executions_total"],
            "delivered": len(delivered), "planned": planned, "failed": failed, "refused": errors.get("Transient", 0),
            "ambiguous": errors.get("Ambiguous", 0), "kills": chaos.kills, "refusals": chaos.refusals.method,
            "accepted": 0, "seconds": seconds, **_waste(executions, delivered, set())}


def _drive_naive(stack: Stack, conn_redis, fake: FakeProviderServer, queues: dict, names: dict, chaos: Chaos,
                 kill) -> None:
    """Until the queues are empty and no job is left started: kill on schedule, and once only killed workers'
    jobs are left, let RQ's heartbeat expiry pass so it retries them as abandoned."""
    from rq import Worker
    from rq.registry import StartedJobRegistry
    started = time.monotonic()
    while True:
        kill()
        queued = sum(q.count for q in queues.values())
        live = {w.name: w.state for w in Worker.all(connection=conn_redis) if w.name in names.values()}
        idle = len(live) == len(names) and all(state == "idle" for state in live.values())
        started_jobs = sum(StartedJobRegistry(q.name, connection=conn_redis).count for q in queues.values())
        if not queued and idle and not fake.in_flight("image") and not fake.in_flight("audio"):
            if len(chaos.kills) < len(KILL_AT) and not started_jobs:
                raise RuntimeError("all calls done before both kills; use more lessons (--lessons)")
            if not started_jobs:
                return
            # the live workers are idle, so what is left was started by a killed worker: an entry expires
            # after at most the job timeout (180 s) + 60 s, then RQ retries the job as abandoned
            for q in queues.values():
                StartedJobRegistry(q.name, connection=conn_redis).cleanup(timestamp=time.time() + 3600)
        if time.monotonic() - started > 240:
            raise RuntimeError(f"the naive pipeline did not finish within 240 s; see {stack.logs}")
        time.sleep(0.05)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lessons", type=int, default=10)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--seed", type=int, default=6)
    parser.add_argument("--refusals", choices=("auto", "iptables", "windows"), default="auto",
                        help="how connections are refused: per connection with iptables (auto: when root and "
                             "iptables is installed), or in time windows")
    args = parser.parse_args(argv)
    planned = args.lessons * args.blocks * 2
    results = []
    with servers() as stack:
        print_machine(stack)
        for run in (run_ours, run_naive):
            with FakeProviderServer() as fake:
                hangs = script(fake, planned * 4, args.seed)
                result = run(stack, fake, args, planned)
                results.append(result)
                say(f"  {result['who']}: {result['executions']} executions, {result['delivered']} delivered, "
                    f"{result['seconds']:.1f} s")
        say()
        say(f"{planned} assets planned ({args.lessons} lessons x {args.blocks} blocks x image + narration); "
            f"scripted: {AMBIGUOUS_SHARE:.0%} of requests that reach the provider time out after executing "
            f"({hangs} of the first {planned * 4}); connections refused {results[0]['refusals']}; "
            f"{len(KILL_AT)} worker SIGKILLs mid-call:")
        rows = []
        for r in results:
            rows.append([r["who"], r["planned"], r["delivered"], r["failed"], r["executions"],
                         r["executions"] / max(r["delivered"], 1), r["extra_accepted"], r["extra_other"],
                         r["undelivered"], r["accepted"], r["ambiguous"], r["refused"], ", ".join(r["kills"]),
                         r["seconds"]])
        say(table(["pipeline", "assets planned", "delivered", "failed", "provider executions",
                   "executions per delivered asset", "repeats an editor accepted", "repeats nobody accepted",
                   "executions never delivered", "risk acceptances", "ambiguous answers", "refused attempts",
                   "workers killed", "seconds"], rows, digits=2))
        say()
        say("executions = delivered + repeats an editor accepted + repeats nobody accepted + executions never "
            "delivered")
        before = results[0]["before"]
        say(f"ours before any acceptance: {before['delivered']} assets delivered, {before['unknown']} outcomes "
            f"unknown and waiting for a person, {before['executions']} executions: no call was repeated without "
            "a recorded decision")
        for r in results:
            d = max(r["delivered"], 1)
            say(f"{r['who']}: {r['executions'] / d:.2f} executions per delivered asset = 1.00 + "
                f"{r['extra_accepted'] / d:.2f} (accepted, recorded) + {r['extra_other'] / d:.2f} (silent) + "
                f"{r['undelivered'] / d:.2f} (paid, not delivered)")
    return 0


if __name__ == "__main__":
    run_main(main)
