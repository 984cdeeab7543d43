"""The chaos soak behind bin/soak: many lessons through the whole system while it is being broken.

It starts its own PostgreSQL and Redis, the fake provider (random latency, ambiguous
time-outs, connection refusals), RQ workers per queue, the dispatcher and a reconciler
loop; saves N lessons; SIGKILLs a random worker every few seconds (restarting it, as a
supervisor would), flushes Redis once and restarts PostgreSQL once; and reports when
every task is terminal or `unknown` (or at the time limit).

Failures it reports: lost tasks (still unfinished at the end) and provider calls
executed twice for one idempotency key without a recorded decision.

`--time-limit` bounds the whole run, from starting the servers to stopping them. The
chaos ends early enough to leave time for the report; a phase that blocks past the limit
(a server that does not stop, a save that hangs) is cut by a watchdog, which prints the
phase it cut and the time each phase took, and exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis

from bin.embedded import Postgres, Valkey, free_port
from pipeline import dispatch, migrations, settings as settings_mod, versions
from pipeline.core.content import parse_draft
from pipeline.core.principal import Principal
from pipeline.core.records import idempotency_key
from pipeline.db import connect
from testkit.fakeprovider import Behaviour, FakeProviderServer
from testkit.helpers import pending_count_mismatch
from testkit.forkserver import die_with_parent
from testkit.system import rq_worker_argv

ROOT = Path(__file__).resolve().parent.parent
FINISHED = ("succeeded", "failed", "unknown", "superseded", "cancelled")
QUEUES = {"image": 2, "tts": 2, "bundle": 1}
REPORT_SECONDS = 20     # kept from the time limit for the report and stopping the servers
SOAK = Principal.without_key("soak", role="editor")   # who saves the soak's lessons (no key: nothing booked)


@dataclass
class Clock:
    """The soak's one time limit, shared by its phases, with the time each phase took."""
    limit: float
    started: float = field(default_factory=time.monotonic)
    phases: dict = field(default_factory=dict)      # name -> seconds
    current: str = ""

    def left(self, keep: float = 0.0) -> float:
        """Seconds left before the limit, less `keep` seconds kept for what comes after."""
        return self.limit - keep - (time.monotonic() - self.started)

    @contextmanager
    def phase(self, name: str):
        self.current, begun = name, time.monotonic()
        try:
            yield
        finally:
            self.phases[name] = round(time.monotonic() - begun, 1)

    def overran(self) -> dict:
        return {"overran": self.current, "time_limit": self.limit, "phases": self.phases}


@dataclass
class Soak:
    args: argparse.Namespace
    base: Path
    rng: random.Random
    clock: Clock
    env: dict = field(default_factory=dict)
    workers: dict = field(default_factory=dict)      # name -> Popen
    others: list = field(default_factory=list)
    faults: list = field(default_factory=list)       # (name, at, recovered_after)
    kills: int = 0

    def spawn(self, argv: list[str], name: str) -> subprocess.Popen:
        log = open(self.base / f"{name}.log", "ab")
        return subprocess.Popen([sys.executable, *argv], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                env={**os.environ, **self.env, "PYTHONPATH": str(ROOT)}, preexec_fn=die_with_parent)

    def start_worker(self, name: str) -> None:
        self.workers[name] = self.spawn(rq_worker_argv(name.split("-")[0]), name)

    def counts(self) -> Counter:
        while self.clock.left() > 0:
            try:
                with connect(self.env["DATABASE_URL"]) as conn:
                    return Counter({r["status"]: r["n"] for r in conn.execute(
                        "SELECT status, count(*) AS n FROM tasks GROUP BY 1")})
            except psycopg.OperationalError:
                time.sleep(0.2)
        raise RuntimeError(f"PostgreSQL did not come back within the time limit ({self.clock.limit:.0f} s)")

    def finished(self) -> int:
        counts = self.counts()
        return sum(counts[s] for s in FINISHED)


def behaviours(rng: random.Random, n: int, ambiguous: float, read_timeout: float) -> list[Behaviour]:
    script = []
    for _ in range(n):
        roll = rng.random()
        if roll < ambiguous:
            script.append(Behaviour("hang", seconds=read_timeout + 0.5))
        else:
            script.append(Behaviour("delay", seconds=rng.uniform(0.0, 0.15)))
    return script


def lesson_body(i: int, blocks: int) -> dict:
    return {"title": f"课程 {i}", "locale": "zh-CN" if i % 2 else "en-US",
            "blocks": [{"key": f"b{j}", "text": f"Lesson {i}, part {j}: 我们在学校学习。"} for j in range(blocks)]}


def save_all(soak: Soak, cfg) -> int:
    client = redis.Redis.from_url(soak.env["REDIS_URL"])
    tasks = 0
    with connect(soak.env["DATABASE_URL"], autocommit=True) as conn:
        for i in range(soak.args.lessons):
            saved = versions.save(conn, parse_draft(lesson_body(i, soak.args.blocks)), cfg, by=SOAK,
                                  send_at_once=True)
            dispatch.send_now(conn, client, saved.outbox_ids)
            tasks += soak.args.blocks * 2 + 1
    return tasks


def wait_for_progress(soak: Soak, since: float, before: int, total: int) -> float:
    """Seconds until one more task finished after a fault; NaN when none did before the chaos must end.

    A fault that lands when nothing can progress any more (every task finished or waiting
    on an editor's decision) has nothing to recover: that counts as recovered at once.
    """
    while soak.clock.left(keep=REPORT_SECONDS) > 0:
        done = soak.finished()
        if done > before or done + len(waiting_on_a_person(soak)) >= total:
            return round(time.monotonic() - since, 2)
        time.sleep(0.1)
    return float("nan")


def chaos(soak: Soak, total: int, pg: Postgres) -> tuple[float, bool]:
    """Break the system until every task is finished or waits on a person; (seconds, whether that happened)."""
    started = time.monotonic()
    next_kill = started + soak.args.kill_every
    flushed = restarted = stalled = False
    while soak.clock.left(keep=REPORT_SECONDS) > 0:
        done = soak.finished()
        if done + len(waiting_on_a_person(soak)) >= total:
            return time.monotonic() - started, True
        now = time.monotonic()
        if now >= next_kill and soak.kills < soak.args.max_kills:
            name = soak.rng.choice(sorted(soak.workers))
            soak.workers[name].send_signal(signal.SIGKILL)
            soak.workers[name].wait()
            soak.start_worker(name)
            soak.kills += 1
            next_kill = now + soak.args.kill_every
            soak.faults.append(("worker SIGKILL " + name, now, wait_for_progress(soak, now, soak.finished(), total)))
        if not flushed and done >= total * 0.25:
            redis.Redis.from_url(soak.env["REDIS_URL"]).flushall()
            flushed = True
            soak.faults.append(("Redis FLUSHALL", now, wait_for_progress(soak, now, soak.finished(), total)))
        if not stalled and done >= total * 0.1:
            stalled = True
            stall_worker(soak, lease=float(soak.env["LEASE_SECONDS"]))
        if not restarted and done >= total * 0.5:
            before = soak.finished()
            pg.restart()
            restarted = True
            soak.faults.append(("PostgreSQL restart", now, wait_for_progress(soak, now, before, total)))
        time.sleep(0.2)
    return time.monotonic() - started, soak.finished() + len(waiting_on_a_person(soak)) >= total


def stall_worker(soak: Soak, lease: float) -> None:
    """SIGSTOP a busy image worker past its lease, then let it go on: its late writes must be refused."""
    name = soak.rng.choice([n for n in soak.workers if n.startswith("image")])
    proc = soak.workers[name]
    proc.send_signal(signal.SIGSTOP)
    soak.faults.append((f"worker SIGSTOP {name} for {lease + 3:.0f} s", time.monotonic(), float("nan")))
    threading_timer(lease + 3, lambda: proc.send_signal(signal.SIGCONT))


def report(soak: Soak, fake: FakeProviderServer, drained: float, total: int) -> dict:
    with connect(soak.env["DATABASE_URL"]) as conn:
        tasks = conn.execute("SELECT id, fingerprint, kind, status FROM tasks").fetchall()
        accepted = {r["task_id"] for r in conn.execute(
            "SELECT task_id FROM events WHERE action = 'duplicate_risk_accepted'")}
        miscounted = pending_count_mismatch(conn)
    by_state = Counter(t["status"] for t in tasks)
    executions = {t["id"]: fake.calls_for(idempotency_key(t["fingerprint"], t["id"])).executions
                  for t in tasks if t["kind"] != "bundle"}
    duplicates = [tid for tid, n in executions.items() if n > 1 and tid not in accepted]
    stale = sum((soak.base / f"{name}.log").read_text(errors="replace").count("lease_lost_nothing_written")
                for name in soak.workers if (soak.base / f"{name}.log").exists())
    blocked = set(waiting_on_a_person(soak))
    lost = [t["id"] for t in tasks if t["status"] not in FINISHED and t["id"] not in blocked]
    soak.faults[:] = [f for f in soak.faults if not f[0].startswith("worker SIGSTOP")] + \
        [(name, at, None) for name, at, _ in soak.faults if name.startswith("worker SIGSTOP")]
    return {
        "lessons": soak.args.lessons, "tasks": len(tasks), "expected_tasks": total,
        "final_states": dict(sorted(by_state.items())),
        "provider_executions": sum(executions.values()),
        "keys_executed_twice_without_decision": len(duplicates),
        "calls_per_key": dict(sorted(Counter(executions.values()).items())),
        "admission_counters_disagree": {str(k): v for k, v in miscounted.items()},
        "waiting_on_unknown_or_failed_dependency": len(blocked), "lost_tasks": len(lost), "_duplicates": duplicates, "_lost": lost, "stale_writes_refused": stale, "worker_kills": soak.kills,
        "seconds_to_drain": round(drained, 1),
        "recovery_seconds": [(name, after) for name, _, after in soak.faults],
        "phase_seconds": soak.clock.phases,
    }


def waiting_on_a_person(soak: Soak) -> list[int]:
    """Tasks (bundles) that cannot run until an editor decides about an unknown or failed dependency."""
    with connect(soak.env["DATABASE_URL"]) as conn:
        return [r["id"] for r in conn.execute(
            "SELECT DISTINCT t.id FROM tasks t JOIN task_deps d ON d.task_id = t.id JOIN tasks x ON x.id = d.depends_on "
            "WHERE t.status = 'ready' AND x.status IN ('unknown', 'failed')")]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/soak", description="Chaos soak of the whole pipeline. "
                                     "Exit 0 when nothing was lost or paid twice, 1 otherwise.")
    parser.add_argument("--lessons", type=int, default=200)
    parser.add_argument("--blocks", type=int, default=4, help="blocks per lesson (tasks = lessons*(2*blocks+1))")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds between worker SIGKILLs")
    parser.add_argument("--max-kills", type=int, default=1000)
    parser.add_argument("--ambiguous", type=float, default=0.03, help="share of calls that time out after send")
    parser.add_argument("--refusals", type=int, default=3, help="windows of refused connections")
    parser.add_argument("--time-limit", type=float, default=900,
                        help=f"seconds for the whole run, servers included; the chaos ends {REPORT_SECONDS} s before")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as JSON only")
    parser.add_argument("--keep", action="store_true", help="keep the servers' data and logs, stopped")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.time_limit <= REPORT_SECONDS:
        raise SystemExit(f"bin/soak: --time-limit must be more than the {REPORT_SECONDS} s kept for the report")
    base = Path(tempfile.mkdtemp(prefix="mediapipe-soak-"))
    base.chmod(0o755)
    soak = Soak(args, base, random.Random(args.seed), Clock(args.time_limit))
    pg, valkey, fake = Postgres(base / "pg", free_port()), Valkey(base / "redis", free_port()), FakeProviderServer()
    watchdog = threading_timer(args.time_limit, lambda: cut(soak, pg, valkey))
    try:
        with soak.clock.phase("start"):
            pg.start(), valkey.start(), fake.start()
            migrations.migrate(pg.url())
            soak.env = soak_env(pg.url(), valkey.url(), base / "media", fake.base_url)
            total = args.lessons * (2 * args.blocks + 1)
            fake.script(*behaviours(soak.rng, total * 2, args.ambiguous, 1.0))
            for queue, count in QUEUES.items():
                for n in range(count):
                    soak.start_worker(f"{queue}-{n}")
            soak.others = [soak.spawn([str(ROOT / "bin" / "dispatch")], "dispatcher"),
                           soak.spawn([str(ROOT / "bin" / "reconcile"), "--loop", "1"], "reconciler")]
        with soak.clock.phase("save"):
            save_all(soak, settings_mod.load(soak.env))
        for i in range(args.refusals):
            threading_timer(soak.rng.uniform(1, 20), lambda: fake.refuse_connections(0.5))
        with soak.clock.phase("chaos"):
            drained, settled = chaos(soak, total, pg)
        with soak.clock.phase("report"):
            result = report(soak, fake, drained, total)
        result["overran"] = None if settled else "chaos"
        result["duplicate_task_ids"] = result.pop("_duplicates")
        result["unfinished_task_ids"] = result.pop("_lost")[:20]
    finally:
        with soak.clock.phase("stop"):
            stop_all(soak, pg, valkey, fake)
        watchdog.cancel()
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    if args.keep:
        print(f"kept {base} (PostgreSQL data in {base / 'pg'}, process logs *.log)")
    print(json.dumps(result, ensure_ascii=False, indent=None if args.json else 2))
    ok = result["lost_tasks"] == 0 and result["keys_executed_twice_without_decision"] == 0 \
        and not result["admission_counters_disagree"] and result["overran"] is None
    return 0 if ok else 1


def stop_all(soak: Soak, pg: Postgres, valkey: Valkey, fake: FakeProviderServer | None, pg_mode: str = "fast") -> None:
    for proc in [*soak.workers.values(), *soak.others]:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    if fake is not None:
        fake.stop()
    valkey.stop()
    pg.stop(pg_mode)


def cut(soak: Soak, pg: Postgres, valkey: Valkey) -> None:
    """The time limit passed inside a phase that did not end: say which, stop what outlives us, exit 1."""
    print(json.dumps(soak.clock.overran()), flush=True)
    try:
        stop_all(soak, pg, valkey, None, pg_mode="immediate")   # PostgreSQL and Valkey are not killed with us
    finally:
        if not soak.args.keep:
            shutil.rmtree(soak.base, ignore_errors=True)
        os._exit(1)


def soak_env(database_url: str, redis_url: str, media: Path, provider_url: str) -> dict:
    # The per-minute rate is lifted: about 800 calls of each provider in a minute pass its default 600, and every
    # call would then wait for the next minute's window, a wait by design that the report would count as a fault's
    # recovery.
    common = {"BASE_URL": provider_url, "PROVIDER": "openai", "DAILY_BUDGET": "unlimited", "READ_TIMEOUT": "1", "CONNECT_TIMEOUT": "0.5",
              "MAX_CONCURRENCY": "8", "RATE_PER_MINUTE": "1000000"}
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media),
           "LEASE_SECONDS": "4", "HEARTBEAT_SECONDS": "1", "LOST_DISPATCH_SECONDS": "3",
           "DISPATCH_CLAIM_SECONDS": "3", "BACKOFF_BASE_SECONDS": "0.2", "BACKOFF_CAP_SECONDS": "2",
           "MAX_ATTEMPTS": "6", "IMAGE_API_KEY": "sk-soak-image",
           "TTS_API_KEY": "sk-soak-tts", "TTS_VOICE": "alloy",
           "VIDEO_ENABLED": "false"}   # the soak is about paid calls: no local render between them and the bundle
    for prefix in ("IMAGE", "TTS"):
        env.update({f"{prefix}_{k}": v for k, v in common.items()})
    return env


def threading_timer(seconds: float, action) -> threading.Timer:
    timer = threading.Timer(seconds, action)
    timer.daemon = True
    timer.start()
    return timer


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
