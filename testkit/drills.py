"""Fault drills: the runner. Each case of the fault matrix (testkit/drill_cases.py), defined once, runs on a whole
stack of processes (gunicorn, the dispatcher, a reconciler loop, one worker per kind, its own Valkey) against the
fake provider.

`bin/drill` runs them on servers it starts and writes their records (JSON, and a Markdown table);
`tests/acceptance/faults/test_drills.py` runs the same definitions in the test suite. A case drives the stack
through its HTTP API and the bin/ commands, injects one fault for real, and checks what it must (`Drill.check`);
the record of its run is read afterwards from the database and the fake provider: ids, times, each task's
states in order, provider calls per input, inputs the provider ran twice, the bundle's sha256, and the seconds
from the fault to the drilled task's next decision. Any input run twice fails a case, whatever it checked.
"""

from __future__ import annotations

import json
import time
import traceback
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from typing import Callable

from pipeline import versions
from pipeline.core.principal import Principal
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import FakeProviderServer
from testkit.helpers import draft, wait_until
from testkit.system import ROOT, Stack, kill, settle, spawn

PASSED, FAILED, NOT_RUN = "passed", "failed", "not_run"
DRILL = Principal.without_key("drill", role="editor")   # who saves a drill's lessons through the engine
SETTLED = ("succeeded", "failed", "unknown", "superseded", "cancelled")


class DrillFailed(AssertionError):
    """A check of the case did not hold."""


@dataclass
class Record:
    """What one run of a case left: the evidence that it passed, or why it failed or was not run."""

    case: str
    outcome: str = NOT_RUN
    reason: str = ""
    content_id: int | None = None
    versions: list[int] = field(default_factory=list)
    task_ids: list[int] = field(default_factory=list)
    started_at: str | None = None
    ended_at: str | None = None
    states: dict[str, list[str]] = field(default_factory=dict)   # task id: the statuses it went through
    calls_per_input: int | None = None       # the most times the provider ran any one input of the content
    duplicate_deliveries: int = 0            # inputs the provider ran more than once
    output_sha256: str | None = None         # the bundle's, when it was made
    recovery_seconds: float | None = None    # from the fault to the drilled task's next decision
    observed: list[str] = field(default_factory=list)   # what the case saw beyond the tasks (runs, answers)


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[["Drill"], None]
    env: dict = field(default_factory=dict)   # settings of the stack this case needs


class Drill:
    """One case's run on one stack: what the case saved, when its fault struck and when it was recovered."""

    def __init__(self, stack: Stack, fake: FakeProviderServer) -> None:
        self.stack, self.fake, self.system = stack, fake, stack.system
        self.content_id: int | None = None
        self.fault_at: float | None = None
        self.recovery_seconds: float | None = None
        self.observed: list[str] = []

    def observe(self, text: str) -> None:
        self.observed.append(text)

    def check(self, holds: object, what: str) -> None:
        if not holds:
            raise DrillFailed(what)

    def db(self):
        return self.system.db()

    def save(self, body: dict) -> dict:
        """Save through the API (202 checked); the content becomes the drill's."""
        response = self.stack.api("POST", "/api/contents", body)
        self.check(response.status_code == 202, f"the save answered {response.status_code}: {response.text[:200]}")
        self.content_id = response.json()["content_id"]
        return response.json()

    def save_quietly(self, blocks: int = 1) -> int:
        """Save through the engine, with no fast path: only the dispatcher sends its messages."""
        with self.db() as conn:
            self.content_id = versions.save(conn, draft(blocks), self.system.cfg, by=DRILL).content_id
        return self.content_id

    def tasks(self) -> list[dict]:
        with self.db() as conn:
            return conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (self.content_id,)).fetchall()

    def task(self, kind: str) -> dict:
        return next(t for t in self.tasks() if t["kind"] == kind)

    def settle(self, timeout: float = 60, done: tuple[str, ...] = SETTLED) -> list[dict]:
        return settle(self.stack, self.content_id, timeout=timeout, done=done)

    def all_succeeded(self, timeout: float = 60) -> list[dict]:
        rows = self.settle(timeout)
        self.check([r["status"] for r in rows] == ["succeeded"] * len(rows),
                   f"not every task succeeded: {[(r['id'], r['status']) for r in rows]}")
        return rows

    def fault(self) -> None:
        self.fault_at = time.monotonic()

    def decided(self, task_id: int, left: tuple[str, ...], timeout: float = 60) -> dict:
        """Wait for the task to leave `left` after the fault; the seconds it took are the recovery time."""
        row = wait_until(lambda: (r := self.system.task(task_id))["status"] not in left and r, timeout=timeout,
                         interval=0.1, message=f"task {task_id} leaving {left}")
        self.recovery_seconds = round(time.monotonic() - self.fault_at, 2)
        return row

    def runs(self, task: dict) -> int:
        """How many times the provider ran the task's input."""
        return self.fake.calls_for(idempotency_key(task["fingerprint"], task["id"])).executions

    def worker(self, kind: str):
        return next(w for w in self.system.workers if kind in w.args and w.poll() is None and "rq.cli" in w.args)

    def logs(self, prefix: str) -> str:
        return "".join(p.read_text() for p in self.system.logs.glob(f"{prefix}*.log"))

    def restart(self, name: str) -> None:
        kill(self.stack.procs[name])
        argv = {"dispatcher": [str(ROOT / "bin" / "dispatch")],
                "reconciler": [str(ROOT / "bin" / "reconcile"), "--loop", "0.5"]}[name]
        self.stack.procs[name] = spawn(self.system, argv, name)

    def record(self, name: str) -> Record:
        """The evidence, read from the database and the fake provider."""
        out = Record(name, content_id=self.content_id, recovery_seconds=self.recovery_seconds,
                     observed=self.observed)
        if self.content_id is None:
            return out
        rows = self.tasks()
        with self.db() as conn:
            events = conn.execute("SELECT task_id, from_status::text AS f, to_status::text AS t FROM events "
                                  "WHERE content_id = %s AND to_status IS NOT NULL ORDER BY id",
                                  (self.content_id,)).fetchall()
        out.versions = sorted({r["version"] for r in rows})
        out.task_ids = [r["id"] for r in rows]
        for e in events:
            seen = out.states.setdefault(str(e["task_id"]), [e["f"]] if e["f"] else [])
            seen.append(e["t"])
        media = [self.runs(r) for r in rows if r["kind"] != "bundle"]
        out.calls_per_input = max(media, default=0)
        out.duplicate_deliveries = sum(1 for n in media if n > 1)
        bundles = [r for r in rows if r["kind"] == "bundle" and r["status"] == "succeeded"]
        out.output_sha256 = bundles[-1]["asset_sha256"] if bundles else None
        return out


def run_case(chosen: Case, make_stack: Callable[..., Stack], fake: FakeProviderServer) -> Record:
    """Run one case on a stack made for it; its record, passed or failed with the reason."""
    started = datetime.now(timezone.utc)
    drill = None
    try:
        drill = Drill(make_stack(**chosen.env), fake)
        chosen.run(drill)
        record = drill.record(chosen.name)
        record.outcome = FAILED if record.duplicate_deliveries else PASSED
        record.reason = f"{record.duplicate_deliveries} input(s) run twice" if record.duplicate_deliveries else ""
    except Exception as exc:  # noqa: BLE001 - a drill records any failure as its outcome
        record = drill.record(chosen.name) if drill is not None and drill.content_id is not None else Record(
            chosen.name)
        record.outcome = FAILED
        record.reason = f"{exc.__class__.__name__}: {exc}"[:500]
        record.states.setdefault("traceback", traceback.format_exc().splitlines()[-3:])
    record.started_at, record.ended_at = started.isoformat(), datetime.now(timezone.utc).isoformat()
    return record


def markdown(records: list[Record]) -> str:
    head = ["case", "outcome", "ran (UTC)", "content", "tasks", "states (task: statuses)", "calls per input",
            "run twice", "output sha256", "recovery s", "observed", "reason"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in records:
        states = "; ".join(f"{t}: {'>'.join(s)}" for t, s in r.states.items() if t != "traceback")
        ran = "-" if r.started_at is None else f"{r.started_at[11:19]}–{r.ended_at[11:19]}"
        lines.append("| " + " | ".join([
            r.case, r.outcome, ran, str(r.content_id or "-"), ", ".join(map(str, r.task_ids)) or "-", states or "-",
            "-" if r.calls_per_input is None else str(r.calls_per_input), str(r.duplicate_deliveries),
            f"`{r.output_sha256[:12]}`" if r.output_sha256 else "-",
            "-" if r.recovery_seconds is None else f"{r.recovery_seconds:g}", "; ".join(r.observed) or "-",
            r.reason.replace("|", "/") or "-",
        ]) + " |")
    return "\n".join(lines) + "\n"


def as_json(records: list[Record]) -> str:
    return json.dumps([asdict(r) for r in records], indent=2, ensure_ascii=False) + "\n"


# bin/drill ---------------------------------------------------------------------------------------------------

def main(argv: list[str]) -> int:
    import argparse
    import shutil
    import subprocess
    import tempfile
    from pathlib import Path

    from bin.embedded import Postgres, free_port
    from pipeline import migrations
    from pipeline.db import connect
    from testkit.drill_cases import CASES
    from testkit.system import System, start_stack, stop_stack, system_env

    names = [c.name for c in CASES]
    parser = argparse.ArgumentParser(prog="bin/drill", description=(
        "Run the fault drills, each case on a whole stack of its own (embedded PostgreSQL, Valkey, gunicorn, the "
        "dispatcher, a reconciler loop, one worker per kind, a fake provider), and write one record per case: "
        "drill.json and drill.md in --out. Exit status: 0 every case chosen passed, 1 one failed."))
    parser.add_argument("--out", type=Path, default=Path("drill-records"), help="where the records go")
    parser.add_argument("--cases", help="comma-separated case names, from: " + "; ".join(names))
    parser.add_argument("--keep", action="store_true", help="keep the servers' directory (logs) afterwards")
    args = parser.parse_args(argv)
    chosen = names if not args.cases else [n.strip() for n in args.cases.split(",")]
    unknown = [n for n in chosen if n not in names]
    if unknown:
        parser.error(f"no such case: {', '.join(unknown)}; the cases are: {'; '.join(names)}")
    base = Path(tempfile.mkdtemp(prefix="mediapipe-drill-"))
    base.chmod(0o755)   # PostgreSQL runs as another user when we are root
    pg = Postgres(base / "pg", free_port())
    records: list[Record] = []
    try:
        pg.start()
        for i, c in enumerate(CASES):
            if c.name not in chosen:
                records.append(Record(c.name, reason="not chosen (--cases)"))
                continue
            with connect(pg.url(), autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "drill_{i}"')
            url = pg.url(f"drill_{i}")
            migrations.migrate(url)
            folder = base / f"case-{i}"
            (folder / "logs").mkdir(parents=True)
            with FakeProviderServer() as fake:
                system = System(system_env(url, "redis://127.0.0.1:1/0", folder / "media", fake.base_url),
                                folder / "logs")
                stacks: list[Stack] = []

                def make(**env: str) -> Stack:
                    stacks.append(start_stack(system, folder / "redis", owner="drill", **env))
                    return stacks[-1]
                try:
                    record = run_case(c, make, fake)
                finally:
                    system.stop()
                    for made in stacks:
                        stop_stack(made)
            records.append(record)
            print(f"{record.outcome:8} {c.name}" + (f": {record.reason}" if record.reason else ""), flush=True)
    finally:
        pg.stop()
        if args.keep:
            print(f"(kept {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True).stdout.strip() or "?"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "drill.json").write_text(as_json(records))
    (args.out / "drill.md").write_text(
        f"Made by `bin/drill` at {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC on {commit}.\n\n" + markdown(records))
    passed = sum(r.outcome == PASSED for r in records)
    print(f"{passed} passed, {sum(r.outcome == FAILED for r in records)} failed, "
          f"{sum(r.outcome == NOT_RUN for r in records)} not run; records in {args.out}/drill.json and drill.md")
    return 1 if any(r.outcome == FAILED for r in records) else 0
