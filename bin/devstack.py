"""The development stack behind bin/dev: servers, migrations and every process, in the foreground.

Embedded PostgreSQL and Valkey keep their data under .data/ (DEV_DATA_DIR) between runs (unless
DATABASE_URL / REDIS_URL name other servers). While it runs, .data/dev.env holds the stack's addresses for the
other bin/ commands of the checkout (bin/devenv.py). Unless SECRET_KEY / LAB_API_KEY are set,
the first start makes them and keeps them in .data/secret-key and .data/lab-api-key
(mode 0600). The processes are the Procfile's own lines, run by `sh` with the stack's
environment (its DATABASE_URL, REDIS_URL, PORT, SECRET_KEY, LAB_API_KEY, the virtualenv
first on PATH), plus the reconciler that cron runs in production. Each process's lines
are prefixed with its name. Ctrl-C (or SIGTERM) stops the processes (RQ finishes the
jobs in hand), then the servers.
Exit codes: 0 stopped cleanly, 1 a process or server failed, 2 bad configuration or busy port.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psycopg
import redis

from bin import devenv
from bin.embedded import Postgres, ServerError, Valkey, require_free_port
from pipeline import migrations, servers, settings as settings_mod
from pipeline.core.errors import ConfigError

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / ".data"   # the default of DEV_DATA_DIR (bin/devenv.py)
PROCFILE = ROOT / "Procfile"
# What cron runs in production (the Procfile's comment), as a loop in the dev stack.
DEV_EXTRA = [("reconciler", "bin/reconcile --loop 10")]
UNUSABLE = 2   # the exit code of a process that found a server it cannot use (pipeline/servers.py)
_print_lock = threading.Lock()


def say(name: str, line: str) -> None:
    with _print_lock:
        sys.stdout.write(f"{name:<11}| {line}\n")
        sys.stdout.flush()


def _die_with_parent() -> None:
    # If bin/dev itself is killed, its children get SIGTERM instead of living on.
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    os.setsid()


@dataclass
class Child:
    name: str
    argv: list[str]
    process: subprocess.Popen | None = None

    def start(self, env: dict[str, str]) -> None:
        self.process = subprocess.Popen(self.argv, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, bufsize=1,
                                        preexec_fn=_die_with_parent)
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.process.stdout:
            say(self.name, line.rstrip("\n"))

    def stop(self) -> None:
        # only the process itself: an RQ worker pool passes the stop on to its workers (warm shutdown)
        if self.process and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)

    def wait(self, deadline: float) -> None:
        if not self.process:
            return
        try:
            self.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say("dev", f"{self.name} did not stop in time; killing it")
        self.kill_group()
        self.process.wait()

    def kill_group(self) -> None:
        """SIGKILL whatever is left in the process's group (its own session): pool workers, strays."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def read_procfile(path: Path = PROCFILE) -> list[tuple[str, str]]:
    """The Procfile's processes in order, as (name, command line); blank lines and # comments are skipped."""
    entries = []
    for number, raw in enumerate(path.read_text().splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, colon, command = line.partition(":")
        if not colon or not re.fullmatch(r"[A-Za-z0-9_-]+", name.strip()) or not command.strip():
            raise ValueError(f"{path.name} line {number}: expected 'name: command', found {raw!r}")
        entries.append((name.strip(), command.strip()))
    return entries


def processes(procfile: Path = PROCFILE) -> list[Child]:
    """Every process of the system: the Procfile's lines as they are, then what cron runs in production."""
    return [Child(name, ["/bin/sh", "-c", f"exec {command}"]) for name, command in read_procfile(procfile) + DEV_EXTRA]


def process_env(env: dict[str, str], cfg) -> dict[str, str]:
    """The environment the Procfile's lines get in the dev stack (on top of the servers' URLs in `env`)."""
    out = dict(env)
    out["PORT"] = str(cfg.port)
    out.setdefault("WEB_HOST", "127.0.0.1")           # the dev stack serves this machine only
    out.setdefault("WEB_CONCURRENCY", "2")
    out.setdefault("GUNICORN_CMD_ARGS", "--access-logfile -")
    out.setdefault("PYTHONUNBUFFERED", "1")           # lines reach the prefixed output as they are written
    # the virtualenv's rq, gunicorn and python3 (bin/dispatch's interpreter) before any other
    out["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", os.defpath)])
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return out


def kept_secret(path: Path, make) -> tuple[str, bool]:
    """The secret kept in `path` (owner-only), made with `make()` on first use; (secret, made now)."""
    if path.exists():
        value = path.read_text().strip()
        if len(value) >= settings_mod.MIN_SECRET:
            return value, False
    path.parent.mkdir(parents=True, exist_ok=True)
    value = make()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(value + "\n")
    return value, True


def _dev_secrets(env: dict[str, str], data: Path | None = None) -> None:
    """SECRET_KEY and LAB_API_KEY for every process: the environment's, or bin/dev's own under `data` (.data/)."""
    from pipeline.keys import new_token
    data = data or DATA
    if not env.get("SECRET_KEY"):
        env["SECRET_KEY"], made = kept_secret(data / "secret-key", lambda: secrets.token_urlsafe(48))
        if made:
            say("dev", f"made a SECRET_KEY for the dev stack, kept in {data / 'secret-key'}")
    if not env.get("LAB_API_KEY"):
        env["LAB_API_KEY"], made = kept_secret(data / "lab-api-key", new_token)
        if made:
            say("dev", f"made an admin API key (LAB_API_KEY), kept in {data / 'lab-api-key'}; sign in with it, "
                       f"send it as X-API-Key: {env['LAB_API_KEY']}")


def _first_admin_key(database_url: str, lab_key: str) -> None:
    from pipeline.keys import authenticate, ensure_admin_key
    with servers.connect(settings_mod.load({**os.environ, "DATABASE_URL": database_url})) as conn:
        ensure_admin_key(conn, lab_key)
        live = authenticate(conn, lab_key) is not None
    if live:
        say("dev", "LAB_API_KEY is an admin API key (bin/dev's own: `cat .data/lab-api-key`, unless you set it)")
    else:
        say("dev", "LAB_API_KEY was revoked; set another one, or delete .data/lab-api-key to get a new one")


def _announce(env: dict[str, str], port: int, env_file: Path) -> None:
    """Write the stack's addresses to the dev environment file (bin/devenv.py) and print where everything is."""
    web = f"http://127.0.0.1:{port}/"
    devenv.write(env_file, {"DATABASE_URL": env["DATABASE_URL"], "REDIS_URL": env["REDIS_URL"],
                            "MEDIA_DIR": env["MEDIA_DIR"], "DEMO_MODE": env["DEMO_MODE"],
                            "LAB_API_KEY": env["LAB_API_KEY"], "MEDIAPIPE_URL": web.rstrip("/")})
    say("dev", f"web:        {web}  (sign in with the key in LAB_API_KEY)")
    say("dev", f"PostgreSQL: {settings_mod.masked_url(env['DATABASE_URL'])}  (psql \"$DATABASE_URL\")")
    say("dev", f"Redis:      {settings_mod.masked_url(env['REDIS_URL'])}  (bin/rq info image tts bundle)")
    say("dev", f"{_shown(env_file)} (0600, until the stack stops) has these with their passwords, and the key: the "
               "bin/ commands of this checkout read it themselves (bin/keys, bin/bulk, bin/reconcile ...), and "
               f"`. {_shown(env_file)}` gives another shell DATABASE_URL, REDIS_URL, LAB_API_KEY and MEDIAPIPE_URL")
    say("dev", "Ctrl-C stops everything")


def _shown(path: Path) -> str:
    """A path as short as it can be shown: relative to the working directory when it is under it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def main(argv: list[str]) -> int:
    import argparse
    argparse.ArgumentParser(prog="bin/dev", description=(
        "Start the whole system in the foreground: embedded PostgreSQL 18 and Valkey 8 (unless DATABASE_URL / "
        "REDIS_URL name servers of your own), migrations, the Procfile's processes and the reconciler. Ctrl-C "
        "stops everything. Exit codes: 0 stopped cleanly, 1 a process or server failed, 2 bad configuration, a "
        "busy port or a server this system cannot use.")).parse_args(argv)
    try:
        cfg = settings_mod.load()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        return 2
    pg = valkey = None
    env = dict(os.environ)
    data = devenv.data_dir(env)
    env_file = devenv.path(env)
    announced = False   # this run wrote env_file (a second bin/dev that fails to start leaves the first's alone)
    children: list[Child] = []
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())
    try:
        require_free_port(cfg.port, "the web app", "PORT")
        if not cfg.database_url:
            pg = Postgres(data / "postgres", cfg.dev_pg_port)
            pg.start()
            env["DATABASE_URL"] = pg.url()
            say("dev", f"PostgreSQL 18 on 127.0.0.1:{cfg.dev_pg_port}, data in {pg.data}")
        if not cfg.redis_url:
            # a fresh password each start (the dev Valkey keeps no data across runs), handed to the children in
            # their environment's REDIS_URL: another local user can neither read it from `ps` nor write to the queues
            valkey = Valkey(data / "redis", cfg.dev_redis_port, password=secrets.token_urlsafe(24))
            valkey.start()
            env["REDIS_URL"] = valkey.url()
            say("dev", f"Valkey on 127.0.0.1:{cfg.dev_redis_port}, loopback only, with a password")
        env.setdefault("MEDIA_DIR", str(data / "media"))
        env.setdefault("DEMO_MODE", "true")
        _dev_secrets(env, data)
        ours = settings_mod.load(env)
        servers.preflight(ours, say=lambda line: say("dev", line))
        for m in migrations.migrate(env["DATABASE_URL"], bounds=ours):
            say("dev", f"applied migration {m.version:04d}_{m.name}")
        _first_admin_key(env["DATABASE_URL"], env["LAB_API_KEY"])
        env = process_env(env, cfg)
        children = processes()
        for child in children:
            child.start(env)
        _announce(env, cfg.port, env_file)
        announced = True
        restarts: list[float] = []
        while not stopping.is_set():
            for child in children:
                if child.process.poll() is None:
                    continue
                if child.process.returncode == UNUSABLE:   # it said why; starting it again would only say it again
                    say("dev", f"{child.name} cannot use the servers (exit {UNUSABLE}, its reason above); stopping")
                    stopping.set()
                    return 2
                # like a process supervisor: a crashed process (a demo worker_crash, say) is started again,
                # unless processes keep dying, which means something is wrong with the stack itself
                restarts = [t for t in restarts if t > time.monotonic() - 60] + [time.monotonic()]
                if len(restarts) > 10:
                    say("dev", f"{child.name} exited with {child.process.returncode}; too many restarts, stopping")
                    stopping.set()
                    return 1
                say("dev", f"{child.name} exited with {child.process.returncode}; restarting it")
                child.kill_group()
                child.start(env)
            stopping.wait(0.5)
        return 0
    except (ServerError, migrations.MigrationError, servers.ServerUnusable) as exc:
        print(f"bin/dev: {exc}", file=sys.stderr)
        return 2
    except (psycopg.OperationalError, redis.RedisError) as exc:
        print(f"bin/dev: cannot reach the servers: {exc}", file=sys.stderr)
        return 2
    finally:
        say("dev", "stopping")
        if announced:
            devenv.remove(env_file)
        deadline = time.monotonic() + 15
        for child in children:
            child.stop()
        for child in children:
            child.wait(deadline)
        if valkey:
            valkey.stop()
        if pg:
            pg.stop()
        say("dev", "stopped")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
