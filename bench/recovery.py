"""Recovery budgets: how long each failure path keeps a task from moving on, with the default settings.

Starts its own PostgreSQL and Valkey, a fake provider answering after `--latency` seconds, one worker
pool per kind as the Procfile runs them, `bin/dispatch` (with its recovery scans every
RECOVERY_SCAN_SECONDS), and `bin/reconcile --loop 60` standing in for the production cron line (every
minute). Every timing setting keeps its default (LEASE_SECONDS, HEARTBEAT_SECONDS, LOST_DISPATCH_SECONDS,
RECOVERY_SCAN_SECONDS, backoff). For each path it saves a one-block lesson, injects the fault, and
measures from the fault to the image task's next decision and to its end, beside the bound
docs/reliability.md states for it:

  worker killed mid-call   SIGKILL of the image pool while the call is in flight
  message lost             the image queue emptied in Redis after the dispatcher sent the message
  Redis restarted empty    Valkey stopped and started again (no persistence) with the message queued
  PostgreSQL restarted     PostgreSQL restarted while the call is in flight

Usage: .venv/bin/python bench/recovery.py [--latency 3] [--reconcile-every 60] [--repeats 1]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rq import Queue  # noqa: E402

from bench.common import BENCH, ROOT, Stack, draft, run_main, servers  # noqa: E402
from bench.report import median, print_machine, say, table  # noqa: E402
from pipeline import settings as settings_mod, versions  # noqa: E402
from testkit.stack import fake_provider, provider_env  # noqa: E402

KINDS = ("image", "tts", "bundle")


def pool_argv(kind: str, redis_url: str) -> list[str]:
    """The Procfile's worker line for one kind, one worker."""
    return ["-m", "rq.cli", "worker-pool", "--quiet", "--url", redis_url, "-w", "bin.worker.Worker", "-n", "1",
            kind, f"{kind}-bulk"]


class Bench:
    def __init__(self, stack: Stack, env: dict[str, str], reconcile_every: float) -> None:
        self.stack, self.env, self.reconcile_every = stack, env, reconcile_every
        self.pools: dict[str, object] = {}
        self.runs = 0

    def start_pool(self, kind: str) -> None:
        self.pools[kind] = self.stack.spawn(f"worker-{kind}", pool_argv(kind, self.stack.redis_url), self.env)

    def start(self) -> None:
        for kind in KINDS:
            self.start_pool(kind)
        self.stack.spawn("dispatcher", [str(ROOT / "bin" / "dispatch")], self.env)
        self.stack.spawn("reconciler", [str(ROOT / "bin" / "reconcile"), "--loop", str(self.reconcile_every)],
                         self.env)

    def save(self) -> int:
        """A new one-block lesson; the id of its image task."""
        self.runs += 1
        cfg = settings_mod.load(self.env)
        with self.stack.db() as conn:
            saved = versions.save(conn, draft(1, f"recovery-{self.runs}-{time.time_ns()}"), cfg, by=BENCH)
            return conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image'",
                                (saved.content_id,)).fetchone()["id"]

    def row(self, task_id: int) -> dict:
        for _ in range(600):   # PostgreSQL may be restarting under us
            try:
                with self.stack.db() as conn:
                    return conn.execute("SELECT status, attempts FROM tasks WHERE id = %s", (task_id,)).fetchone()
            except Exception:  # noqa: BLE001 - the restart path: ask again
                time.sleep(0.1)
        raise RuntimeError("PostgreSQL did not come back")

    def wait(self, what: str, condition: Callable[[], bool], timeout: float = 900) -> float:
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what}: not within {timeout} s")
            time.sleep(0.1)
        return time.monotonic()

    def in_flight(self, task_id: int, fake) -> None:
        self.wait("call in flight", lambda: self.row(task_id)["status"] == "running" and fake.in_flight("image") > 0)

    def measure(self, task_id: int, fault_at: float, left: tuple[str, ...]) -> tuple[float, float, str]:
        """(seconds to the first decision out of `left`, seconds to a final state, that state)."""
        decided = self.wait("decision", lambda: self.row(task_id)["status"] not in left)
        final = self.wait("end", lambda: self.row(task_id)["status"] in ("succeeded", "failed", "unknown"))
        return decided - fault_at, final - fault_at, self.row(task_id)["status"]


def worker_killed(b: Bench, fake) -> tuple[float, float, str]:
    task_id = b.save()
    b.in_flight(task_id, fake)
    b.stack.kill(b.pools["image"])
    fault = time.monotonic()
    b.start_pool("image")
    return b.measure(task_id, fault, ("running",))


def queued_without_a_worker(b: Bench) -> tuple[int, Queue]:
    """A new lesson whose image message waits in Redis while no image worker runs."""
    b.stack.kill(b.pools["image"])
    task_id = b.save()
    queue = Queue("image", connection=b.stack.redis())
    b.wait("message sent", lambda: queue.count > 0)
    return task_id, queue


def message_lost(b: Bench, fake) -> tuple[float, float, str]:
    task_id, queue = queued_without_a_worker(b)
    queue.empty()
    fault = time.monotonic()
    b.start_pool("image")
    return b.measure(task_id, fault, ("ready",))


def redis_restarted(b: Bench, fake) -> tuple[float, float, str]:
    task_id, _ = queued_without_a_worker(b)
    b.stack.valkey.stop()
    b.stack.valkey.start()
    fault = time.monotonic()
    b.start_pool("image")
    return b.measure(task_id, fault, ("ready",))


def postgres_restarted(b: Bench, fake) -> tuple[float, float, str]:
    task_id = b.save()
    b.in_flight(task_id, fake)
    fault = time.monotonic()
    b.stack.pg.restart()
    return b.measure(task_id, fault, ("running",))


PATHS = {"worker killed mid-call": worker_killed, "message lost": message_lost,
         "Redis restarted empty": redis_restarted, "PostgreSQL restarted mid-call": postgres_restarted}
BOUNDS = {"worker killed mid-call": 60.0, "message lost": 90.0, "Redis restarted empty": 90.0}  # to the decision


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bench/recovery.py")
    parser.add_argument("--latency", type=float, default=3.0, help="the fake provider's answer time (s)")
    parser.add_argument("--reconcile-every", type=float, default=60.0, help="the cron interval (s)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--paths", default=",".join(PATHS), help="comma-separated, from: " + ", ".join(PATHS))
    args = parser.parse_args(argv)
    with servers() as stack:
        print_machine(stack)
        fake = fake_provider(args.latency)
        try:
            env = stack.env(**provider_env(fake, fake, 4))
            cfg = settings_mod.load(env)
            say(f"LEASE_SECONDS {cfg.lease_seconds:g}, HEARTBEAT_SECONDS {cfg.heartbeat_seconds:g}, "
                f"LOST_DISPATCH_SECONDS {cfg.lost_dispatch_seconds:g}, "
                f"RECOVERY_SCAN_SECONDS {cfg.recovery_scan_seconds:g}, reconcile every {args.reconcile_every:g} s, "
                f"provider latency {args.latency:g} s")
            bench = Bench(stack, env, args.reconcile_every)
            bench.start()
            rows = []
            for name in args.paths.split(","):
                runs = [PATHS[name](bench, fake) for _ in range(args.repeats)]
                bound, worst = BOUNDS.get(name), max(r[0] for r in runs)
                rows.append([name, len(runs), median(r[0] for r in runs), worst,
                             "-" if bound is None else f"{bound:g}", "-" if bound is None else
                             ("yes" if worst <= bound else "NO"), median(r[1] for r in runs),
                             max(r[1] for r in runs), ", ".join(sorted({r[2] for r in runs}))])
                say(f"  {name}: {runs}")
            say()
            say("Seconds from the fault to the task's next decision and to its final state:")
            say(table(["failure path", "runs", "to decision p50", "max", "bound", "within", "to final p50", "max",
                       "final"], rows))
        finally:
            fake.stop()
    return 0


if __name__ == "__main__":
    run_main(main)
