"""A running system for process-level tests: real `rq worker` processes, the dispatcher and
reconciler as the bin/ commands, the fake provider server, the test's PostgreSQL and Redis.

`System.dispatch` and `System.reconcile` run the commands' own `main` in this process: a new interpreter
importing the app took 1 to 2.5 s a call on a loaded 2-core machine (0.04 to 0.11 s in this process), and a
drain makes dozens. `System.run` starts the real command, for a test whose proof is the process itself (its exit
code, its output, two runs at once); tests/acceptance/test_commands.py proves the commands as processes."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import requests

from pipeline import settings as settings_mod
from pipeline.db import connect
from pipeline.core.lanes import worker_queues
from testkit import forkserver
from testkit.helpers import EDITOR, wait_until
from testkit.stack import descendants

ROOT = Path(__file__).resolve().parent.parent


def rq_worker_argv(kind: str) -> list[str]:
    """RQ's stock command line for one worker of a kind (what each process of the Procfile's pool runs):
    our SimpleWorker class, its queues in priority order, the interactive lane first, and RQ's settings from
    bin/rqconfig.py (the environment's REDIS_URL, and the start-up check that waits for the servers)."""
    return ["-m", "rq.cli", "worker", "--quiet", "-c", "bin.rqconfig", "-w", "bin.worker.Worker",
            *worker_queues(kind)]



@dataclass
class System:
    env: dict[str, str]
    logs: Path
    workers: list[forkserver.Forked] = field(default_factory=list)
    starting: list[forkserver.Forked] = field(default_factory=list)   # workers not yet seen listening

    @property
    def cfg(self) -> settings_mod.Settings:
        return settings_mod.load(self.env)

    def with_env(self, **env: str) -> "System":
        """The same system with other settings; its workers are stopped with this one's."""
        return System({**self.env, **env}, self.logs, self.workers, self.starting)

    def db(self) -> psycopg.Connection:
        return connect(self.env["DATABASE_URL"], autocommit=True)

    def _spawn(self, argv: list[str], name: str) -> forkserver.Forked:
        """`python *argv` as a process of its own, its output in the system's logs; forked from the fork server,
        which has the app imported (testkit/forkserver.py)."""
        env = {**os.environ, **self.env, "PYTHONPATH": str(ROOT)}
        return forkserver.spawn(argv, env, ROOT, self.logs / f"{name}-{len(self.workers)}.log")

    def start_worker(self, queue: str) -> forkserver.Forked:
        proc = self._spawn(rq_worker_argv(queue), f"worker-{queue}")
        self.workers.append(proc)
        self.starting.append(proc)
        return proc

    def listening(self, *procs: forkserver.Forked, timeout: float = 60) -> None:
        """Until each of these worker processes has registered with RQ (started, and about to take a job)."""
        import redis as redis_mod
        from rq import Worker

        client = redis_mod.Redis.from_url(self.env["REDIS_URL"])
        try:
            wait_until(lambda: {p.pid for p in procs} <= {w.pid for w in Worker.all(connection=client)},
                       timeout=timeout, interval=0.1, message=f"{len(procs)} worker(s) listening")
        finally:
            client.close()

    def run(self, command: str, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        env = {**os.environ, **self.env, "PYTHONPATH": str(ROOT)}
        return subprocess.run([sys.executable, str(ROOT / "bin" / command), *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=timeout)

    def run_here(self, command: str, *args: str) -> subprocess.CompletedProcess:
        """`bin/<command> args` as `run` gives it (exit code, output), from the command's own `main` called in
        this process with this system's settings; off the main thread (which alone may set the signal handlers
        a command installs) the real process."""
        if threading.current_thread() is not threading.main_thread():
            return self.run(command, *args)
        from bin import commands
        main = getattr(commands, f"{command}_main")
        out, err = io.StringIO(), io.StringIO()
        handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        saved = {name: os.environ.get(name) for name in self.env}
        os.environ.update(self.env)
        try:
            with redirect_stdout(out), redirect_stderr(err):
                try:
                    code = main(list(args))
                except SystemExit as exit_:
                    code = exit_.code if isinstance(exit_.code, int) else 1
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
        return subprocess.CompletedProcess([command, *args], code, out.getvalue(), err.getvalue())

    def dispatch(self) -> str:
        """`bin/dispatch --once`, once the workers started since the last dispatch listen: a test's wait for what
        its message sets going then counts from the send, not from a worker's start, which takes seconds under
        load (and the command as a process used to take as long itself)."""
        alive = [proc for proc in self.starting if proc.poll() is None]
        if alive:
            self.listening(*alive)
        self.starting.clear()
        result = self.run_here("dispatch", "--once")
        assert result.returncode == 0, result.stderr
        return result.stdout

    def reconcile(self) -> subprocess.CompletedProcess:
        result = self.run_here("reconcile", "--once")
        assert result.returncode == 0, result.stderr[-3000:]
        return result

    def stop(self) -> None:
        """Kill every process the system started, and what they started (a pool's workers would outlive their
        pool, and take the next test's jobs from this Valkey)."""
        for proc in self.workers:
            if proc.poll() is None:
                for pid in descendants(proc.pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                proc.send_signal(signal.SIGCONT)
                proc.kill()
        for proc in self.workers:
            proc.wait(10)

    def save_lesson(self, blocks: int = 1, prefix: str = "") -> tuple[int, int]:
        """Save a lesson through the engine (no web): its content id and its first image task's id."""
        from pipeline import versions
        from pipeline.core.content import parse_draft
        from testkit.helpers import lesson

        with self.db() as conn:
            saved = versions.save(conn, parse_draft(lesson(blocks, prefix=prefix)), self.cfg, by=EDITOR)
            image = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image' ORDER BY id LIMIT 1",
                                 (saved.content_id,)).fetchone()
        return saved.content_id, image["id"]

    def task(self, task_id: int) -> dict:
        with self.db() as conn:
            return conn.execute("SELECT * FROM tasks WHERE id = %s", (task_id,)).fetchone()

    def wait_status(self, task_id: int, *statuses: str, timeout: float = 30) -> dict:
        return wait_until(lambda: (row := self.task(task_id))["status"] in statuses and row, timeout=timeout,
                          message=f"task {task_id} reaching {statuses}")

    @contextmanager
    def holding(self, sql: str, *params):
        """Hold a lock (taken by `sql`) in an open transaction until the block ends, then roll back."""
        with self.db() as blocker:
            blocker.execute("BEGIN")
            blocker.execute(sql, params or None)
            try:
                yield blocker
            finally:
                blocker.execute("ROLLBACK")

    @contextmanager
    def holding_after_the_claim(self, start, timeout: float = 20):
        """Hold the one worker `start` sets going between its committed claim and its check before the call.

        The claim's transaction also takes the provider slot, so it waits on a lock of the slot table; a
        lock of the versions table, which that transaction has read, is queued behind it; once the slot
        lock goes, the claim commits and the worker's lease check (which reads versions) waits instead.
        Yields once the claim is committed and the worker waits; both locks go when the block ends.
        """
        granted, release = threading.Event(), threading.Event()

        def queue_the_versions_lock() -> None:
            with self.holding("LOCK TABLE versions IN ACCESS EXCLUSIVE MODE"):
                granted.set()
                release.wait(timeout * 3)
        queued = threading.Thread(target=queue_the_versions_lock, daemon=True)
        try:
            with self.holding("LOCK TABLE provider_slots IN EXCLUSIVE MODE"):
                start()
                self.waiting_on_lock(timeout)
                queued.start()
                self.waiting_on_lock(timeout, sessions=2)
            if not granted.wait(timeout):
                raise AssertionError("the claim did not commit")
            self.waiting_on_lock(timeout)
            yield
        finally:
            release.set()
            queued.join(timeout)

    def sessions_waiting_on_locks(self) -> int:
        with self.db() as conn:
            return conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                                "AND datname = current_database()").fetchone()["n"]

    def sessions_of(self, proc: forkserver.Forked) -> list[int]:
        """The database sessions (backend pids) a live process of ours has open, found by its TCP ports."""
        ports = client_ports(proc.pid)
        with self.db() as conn:
            return [r["pid"] for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE client_port = ANY(%s)",
                                                   (sorted(ports),)).fetchall()]

    def waiting_on_lock(self, timeout: float = 20, sessions: int = 1) -> None:
        """Until `sessions` other sessions wait on a lock (a worker we blocked on purpose)."""
        wait_until(lambda: self.sessions_waiting_on_locks() >= sessions, timeout=timeout,
                   message=f"{sessions} session(s) waiting on a lock")


def client_ports(pid: int) -> set[int]:
    """The local TCP ports of a process's sockets (its sockets' inodes, looked up in the kernel's tables)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:   # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[9] in inodes:
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def kill(proc: forkserver.Forked) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)


def drain(system: System, content_id: int, timeout: float = 60, done=("succeeded", "failed", "unknown",
                                                                       "superseded", "cancelled")) -> list[dict]:
    """Dispatch and reconcile until every task of the content is terminal or unknown."""
    deadline = time.monotonic() + timeout
    while True:
        with system.db() as conn:
            rows = conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (content_id,)).fetchall()
        if all(r["status"] in done for r in rows):
            return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"tasks not finished: {[(r['id'], r['status']) for r in rows]}")
        system.dispatch()
        system.reconcile()
        time.sleep(0.3)


class Stack:
    """The whole system as processes: gunicorn web, workers, dispatcher, reconciler loop, own Redis."""

    def __init__(self, system, valkey, port: int, token: str):
        self.system, self.valkey, self.port, self.token = system, valkey, port, token
        self.session = requests.Session()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def api(self, method: str, path: str, body=None, **headers) -> requests.Response:
        return self.session.request(method, self.url + path, json=body, timeout=10,
                                    headers={"X-API-Key": self.token, **headers})

    @staticmethod
    def system_root():
        return ROOT

    def save(self, body) -> dict:
        response = self.api("POST", "/api/contents", body)
        assert response.status_code == 202, response.text
        return response.json()


def system_env(database_url: str, redis_url: str, media_dir: Path, provider_url: str) -> dict[str, str]:
    """The settings of a fault-test system: short leases and backoff, both providers at the fake's URL, no lesson
    video (local work after the paid calls; its own tests turn it on)."""
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media_dir),
            "SECRET_KEY": "test-only-secret-key-0123456789abcdefghij",
            "LEASE_SECONDS": "3", "HEARTBEAT_SECONDS": "0.5", "BACKOFF_BASE_SECONDS": "0.1",
            "BACKOFF_CAP_SECONDS": "0.5", "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
            "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": provider_url, "IMAGE_API_KEY": "sk-test-image",
            "IMAGE_DAILY_BUDGET": "unlimited", "IMAGE_READ_TIMEOUT": "2", "IMAGE_CONNECT_TIMEOUT": "1",
            "TTS_PROVIDER": "openai", "TTS_BASE_URL": provider_url, "TTS_API_KEY": "sk-test-tts",
            "TTS_DAILY_BUDGET": "unlimited", "TTS_VOICE": "alloy", "TTS_READ_TIMEOUT": "2",
            "TTS_CONNECT_TIMEOUT": "1", "VIDEO_ENABLED": "false"}


def start_stack(system: System, redis_dir: Path, owner: str = "editor-0", **env: str) -> Stack:
    """The whole system on `system`'s database with its own Valkey (in `redis_dir`): gunicorn, the dispatcher,
    a reconciler loop and one worker per kind, each as a process; returned once the web answers and the
    three workers have registered. One key of `owner` saves and approves (`Stack.token`). Stop it with
    `stop_stack`."""
    import redis as redis_mod
    from rq import Worker

    from bin.embedded import Valkey, free_port
    from pipeline import keys

    valkey = Valkey(redis_dir, free_port())
    valkey.start()
    running = system.with_env(REDIS_URL=valkey.url(), DEMO_MODE="false", ALLOW_SELF_APPROVAL="true", **env)
    with running.db() as conn:
        _, token = keys.create(conn, owner, "admin")
    built = Stack(running, valkey, free_port(), token)
    built.owner = owner
    built.procs = {
        "web": spawn(running, ["-m", "gunicorn", "--bind", f"127.0.0.1:{built.port}", "--workers", "2",
                               "web:create_app()"], "web"),
        "dispatcher": spawn(running, [str(ROOT / "bin" / "dispatch")], "dispatcher"),
        "reconciler": spawn(running, [str(ROOT / "bin" / "reconcile"), "--loop", "0.5"], "reconciler"),
    }
    for queue in ("image", "tts", "bundle"):
        running.start_worker(queue)

    def healthy():
        try:
            return built.session.get(built.url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False
    wait_until(healthy, timeout=60, message="the web app answering")
    # and every worker registered with RQ: a test that then takes Redis away finds them all started
    client = redis_mod.Redis.from_url(valkey.url())
    wait_until(lambda: len(Worker.all(connection=client)) >= 3, timeout=60, message="the three workers started")
    client.close()
    return built


def stop_stack(stack: Stack) -> None:
    stack.system.stop()
    stack.valkey.stop()


def spawn(system, argv, name):
    proc = system._spawn(argv, name)
    system.workers.append(proc)
    return proc


def settle(stack: Stack, content_id: int, timeout: float = 60, done=("succeeded", "failed", "unknown",
                                                                      "superseded", "cancelled")) -> list[dict]:
    """Wait (the stack's own dispatcher and reconciler run) until every task of the content is settled."""
    def rows():
        with stack.system.db() as conn:
            found = conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (content_id,)).fetchall()
        return found if found and all(r["status"] in done for r in found) else None
    return wait_until(rows, timeout=timeout, interval=0.2, message=f"content {content_id} settling")
