"""Shared tools of the benchmark scripts: throw-away servers, worker processes, content (what they print:
bench/report.py).

Every benchmark starts its own PostgreSQL (fsync and synchronous_commit on) and Valkey on free ports
in a fresh temporary directory, and stops them at the end, also on Ctrl-C. This module never
touches the development data in `.data/`, and the pipeline never imports it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import redis  # noqa: E402

from bin.embedded import Postgres, Valkey, free_port  # noqa: E402
from pipeline import migrations, settings as settings_mod  # noqa: E402
from pipeline.core.content import Draft, parse_draft  # noqa: E402
from pipeline.core.principal import Principal  # noqa: E402
from pipeline.db import connect  # noqa: E402
from bench.report import engine_digest, say  # noqa: E402

PYTHON = sys.executable
QUEUES = ("image", "tts", "bundle")


@dataclass
class Stack:
    """One benchmark's PostgreSQL and Valkey, its media directory and the processes it started."""

    base: Path
    pg: Postgres
    valkey: Valkey
    dbname: str = "bench"
    statements: bool = False           # pg_stat_statements is loaded (and created in every new database)
    procs: list[subprocess.Popen] = field(default_factory=list)

    @property
    def database_url(self) -> str:
        return self.pg.url(self.dbname)

    @property
    def redis_url(self) -> str:
        return self.valkey.url(0)

    @property
    def media_dir(self) -> Path:
        return self.base / "media"

    @property
    def logs(self) -> Path:
        path = self.base / "logs"
        path.mkdir(exist_ok=True)
        return path

    def env(self, **extra: str) -> dict[str, str]:
        """Environment-style settings of the pipeline on these servers (production defaults otherwise).

        The per-minute provider rate limit is lifted: benchmarks make thousands of calls a minute to
        providers that have no limit, and a limit reached would only measure a wait of up to a minute.
        """
        return {"DATABASE_URL": self.database_url, "REDIS_URL": self.redis_url, "MEDIA_DIR": str(self.media_dir),
                "SECRET_KEY": "bench-only-secret-0123456789abcdefghij", "IMAGE_RATE_PER_MINUTE": "1000000",
                "TTS_RATE_PER_MINUTE": "1000000", "KEY_SAVES_PER_MINUTE": "1000000",
                "KEY_MAX_PENDING_TASKS": "100000000", **extra}

    def settings(self, **extra: str) -> settings_mod.Settings:
        return settings_mod.load(self.env(**extra))

    def db(self, dbname: str | None = None) -> psycopg.Connection:
        return connect(self.pg.url(dbname or self.dbname), autocommit=True)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url)

    def create_database(self, name: str, migrate: bool = True) -> str:
        with connect(self.pg.url(), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        url = self.pg.url(name)
        if self.statements:
            with connect(url, autocommit=True) as conn:
                conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        if migrate:
            migrations.migrate(url)
        return url

    def use_database(self, name: str) -> None:
        """Point the stack (and the env of processes spawned later) at a fresh, migrated database."""
        self.create_database(name)
        self.dbname = name

    @property
    def postmaster_pid(self) -> int:
        return int((self.pg.data / "postmaster.pid").read_text().split()[0])

    # processes ----------------------------------------------------------------------------------

    def spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        """A Python process of ours in its own session (so a SIGKILL of its group takes its children)."""
        log = open(self.logs / f"{name}.log", "ab")
        full_env = {**os.environ, **(env if env is not None else self.env()), "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([PYTHON, *argv], cwd=ROOT, env=full_env, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log.close()
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen, timeout: float = 30) -> int:
        """SIGTERM (RQ's warm shutdown: the current job finishes), then SIGKILL after `timeout`."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill(proc)
        return proc.returncode

    def kill(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(10)

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 15
        for proc in self.procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)
        self.procs.clear()


def _terminate_on_sigterm() -> None:
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, handler)


@contextmanager
def servers(*, statements: bool = False, keep: bool = False) -> Iterator[Stack]:
    """Fresh PostgreSQL (durable) and Valkey in a temporary directory; everything is stopped and removed after.

    `statements` loads pg_stat_statements (one restart). `keep` leaves the directory (logs) in place.
    PostgreSQL is the embedded wheel's, or the installation whose programs BENCH_PG_BINDIR names (Debian's
    PostgreSQL 15: /usr/lib/postgresql/15/bin), so a figure can be taken on the server a user runs.
    """
    _terminate_on_sigterm()
    base = Path(tempfile.mkdtemp(prefix="mediapipe-bench-"))
    base.chmod(0o755)  # PostgreSQL runs as another user when we are root
    bindir = os.environ.get("BENCH_PG_BINDIR")
    pg = Postgres(base / "pg", free_port(), durable=True, bindir=Path(bindir) if bindir else None)
    vk = Valkey(base / "redis", free_port())
    stack = Stack(base, pg, vk, statements=statements)
    code = engine_digest()
    try:
        pg.start()
        if statements:
            with connect(pg.url(), autocommit=True) as conn:
                conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
            pg.restart()
        vk.start()
        stack.create_database(stack.dbname)
        yield stack
    finally:
        if engine_digest() != code:
            say(f"WARNING: the engine's files changed during this run ({code} -> {engine_digest()}); "
                "its figures mix two versions: run it again")
        stack.stop_all()
        vk.stop()
        try:
            pg.stop()
        finally:
            if keep:
                say(f"(kept {base})")
            else:
                shutil.rmtree(base, ignore_errors=True)


# -- content ---------------------------------------------------------------------------------------

# Who a benchmark's own calls of the pipeline name (saves, cancels, retries, approvals): no key, so no key's limits
# or spend apply; the reviewer approves what the bench saved, as ALLOW_SELF_APPROVAL (the default) lets one person.
BENCH = Principal.without_key("bench", role="editor")
BENCH_REVIEWER = Principal.without_key("bench-reviewer", role="reviewer")


def editor_token(stack: Stack) -> str:
    """A new editor's API key on the bench database, for the benchmark's own requests."""
    from pipeline import keys
    with stack.db() as conn:
        return keys.create(conn, "bench@example.com", "editor")[1]


def lesson(blocks: int, tag: str) -> dict:
    """A lesson whose every block text is unique to `tag` (so no asset is reused from an earlier lesson)."""
    return {"title": f"基准 {tag}", "locale": "zh-CN",
            "blocks": [{"key": f"b{i}", "text": f"{tag}：第{i}段，我们在学校学习中文。"} for i in range(1, blocks + 1)]}


def draft(blocks: int, tag: str) -> Draft:
    return parse_draft(lesson(blocks, tag))


def tasks_per_lesson(blocks: int) -> int:
    return 2 * blocks + 1  # image + speech per block, one bundle


# -- workers ---------------------------------------------------------------------------------------

WORKER_SCRIPT = str(ROOT / "bench" / "instant_worker.py")


def worker_argv(kind: str, worker_class: str, name: str, *, queues: Sequence[str] = QUEUES, burst: bool = False,
                extra: Sequence[str] = ()) -> list[str]:
    """argv of a bench worker: kind "engine" runs pipeline.message.run_task with the instant provider,
    kind "plain" is a plain RQ worker (for bench.jobs functions)."""
    argv = [WORKER_SCRIPT, "--kind", kind, "--class", worker_class, "--name", name, "--queues", ",".join(queues)]
    return argv + (["--burst"] if burst else []) + list(extra)


def wait_all_done(conn, sql: str, total: int, what: str, logs: Path, *, stall_seconds: float | None = None,
                  on_stall=None) -> dict:
    """Poll `sql` (a row with `done` and `bad` counts, and whatever else the caller wants back) every 0.1 s until
    `done` reaches `total`; a `bad` count raises. With `stall_seconds`, `on_stall(row)` is called (and must raise)
    when `done` has not moved for that long. Returns the last row."""
    progress = (-1, time.monotonic())
    while True:
        row = conn.execute(sql).fetchone()
        if row["bad"]:
            raise RuntimeError(f"{row['bad']} {what} did not succeed; see {logs}")
        if row["done"] == total:
            return row
        if row["done"] != progress[0]:
            progress = (row["done"], time.monotonic())
        elif stall_seconds is not None and time.monotonic() - progress[1] > stall_seconds:
            on_stall(row)
        time.sleep(0.1)


def wait_workers_idle(conn_redis: redis.Redis, names: Iterable[str], timeout: float = 60) -> None:
    from rq import Worker
    wanted = set(names)
    deadline = time.monotonic() + timeout
    while True:
        idle = {w.name for w in Worker.all(connection=conn_redis) if w.name in wanted and w.state == "idle"}
        if idle == wanted:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers not ready after {timeout} s: {sorted(wanted - idle)}")
        time.sleep(0.05)


@contextmanager
def quiet_logs(path: Path) -> Iterator[None]:
    """Send the pipeline's JSON log lines written in this process (stderr) to `path` instead of the terminal."""
    saved = sys.stderr
    with open(path, "a") as sink:
        sys.stderr = sink
        try:
            yield
        finally:
            sys.stderr = saved


def stop_stack(stack, *fakes) -> None:
    """Stop a bin/dev stack (testkit.stack.DevStack) and its fake providers; say which processes outlived it."""
    left = stack.stop()
    for fake in fakes:
        fake.stop()
    if left:
        say(f"WARNING: processes left after stopping the stack: {left}")


def run_main(main: Callable[[list[str]], int]) -> None:
    try:
        sys.exit(main(sys.argv[1:]))
    except KeyboardInterrupt:
        say("interrupted; servers stopped")
        sys.exit(130)
