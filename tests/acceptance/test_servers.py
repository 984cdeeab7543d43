"""The system on the servers users already have: PostgreSQL 15 and 18 under a role that owns its database
and is not a superuser, directly and through PgBouncer in transaction pooling mode, with Redis 7 behind an
ACL user and a password; the whole stack as bin/dev starts it, driven over HTTP through the seed's demo
flow (202, media done, approve, delivery 200).

PostgreSQL 15, PgBouncer and Redis 7 are Debian's packages (bin/test installs them as root); without them
these tests skip and say why, except in CI, where they must run.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import psycopg
import pytest
import requests

from bin import devstack
from bin.embedded import Postgres, free_port
from pipeline import keys, settings
from pipeline.db import connect
from testkit.servers import PG15_BIN, PgBouncer, Redis7, require_debian
from testkit.stack import ROOT, DevStack, descendants, lesson

pytestmark = pytest.mark.slow
APP, APP_PASSWORD = "lessons_app", "app-password-in-no-argv-0123"


@pytest.fixture(scope="module", params=["15", "18"])
def postgres(request):
    """A PostgreSQL server of each supported end of the range, with a role of the usual managed kind."""
    if request.param == "15":
        require_debian("postgresql-15")
    base = Path(tempfile.mkdtemp(prefix=f"mediapipe-pg{request.param}-"))
    base.chmod(0o755)
    server = Postgres(base, free_port(), durable=False, bindir=PG15_BIN if request.param == "15" else None)
    server.start()
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {APP} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '{APP_PASSWORD}'")
    yield server
    server.stop(mode="immediate")
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="module")
def redis7(tmp_path_factory):
    require_debian("redis-server")
    server = Redis7(tmp_path_factory.mktemp("redis7"), free_port())
    server.start()
    yield server
    server.stop()


def owned_database(server: Postgres) -> str:
    name = f"lessons_{free_port()}"
    with psycopg.connect(server.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" OWNER {APP}')
    return name


def direct_url(server: Postgres, name: str) -> str:
    return f"postgresql://{APP}:{APP_PASSWORD}@127.0.0.1:{server.port}/{name}"


@pytest.mark.parametrize("route", ["direct", "pgbouncer"])
def test_the_demo_flow_runs_on_the_servers_users_have(postgres, redis7, route, tmp_path):
    # given a database owned by a role that is not a superuser, reached directly or through PgBouncer in
    # transaction pooling mode (the reconciler's and dispatcher's session locks through its session pool)
    name = owned_database(postgres)
    env, bouncer = {}, None
    if route == "pgbouncer":
        require_debian("pgbouncer")
        bouncer = PgBouncer(free_port(), postgres.port, {APP: APP_PASSWORD}, (name,))
        bouncer.start()
        env = {"DB_POOLER": "pgbouncer", "DATABASE_SESSION_URL": bouncer.url(APP, f"{name}_session")}
    url = bouncer.url(APP, name) if bouncer else direct_url(postgres, name)
    stack = None
    try:
        # bin/migrate, as a deploy runs it, through the same route
        migrated = subprocess.run([str(ROOT / "bin" / "migrate")], cwd=ROOT, capture_output=True, text=True,
                                  timeout=120, env={**os.environ, "DATABASE_URL": url, **env})
        assert migrated.returncode == 0, migrated.stdout + migrated.stderr
        # when bin/dev starts the whole system on them, with Redis 7 behind an ACL user's password
        stack = DevStack.start(database_url=url, redis_url=redis7.url(), media_dir=tmp_path / "media",
                               port=free_port(), log=tmp_path / "dev.log", **env)
        stack.wait_ready()
        # then the seed's demo flow passes: 202, every media task done, approve, delivery 200
        _, saved = stack.save(lesson(3, f"servers-{route}"))
        assert stack.wait_done(saved["content_id"])["statuses"] == ["succeeded"]
        with connect(direct_url(postgres, name), autocommit=True) as conn:
            reviewer = keys.create(conn, "reviewer@servers", "reviewer")[1]
        approved = requests.post(f"{stack.url}/api/contents/{saved['content_id']}/versions/1/approve",
                                 headers={"X-API-Key": reviewer}, timeout=10)
        assert approved.status_code == 200, approved.text
        delivery = requests.get(f"{stack.url}/api/contents/{saved['content_id']}/delivery",
                                headers={"X-API-Key": reviewer}, timeout=10)
        assert delivery.status_code == 200, delivery.text
        assert delivery.json()["version"] == 1
        # and no process of the stack shows a password on its command line, where ps would give it away
        for pid in descendants(stack.proc.pid) | {stack.proc.pid}:
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            assert APP_PASSWORD not in argv and redis7.password not in argv, argv.replace("\0", " ")
        # and the bounds are the role's own in this database (what a pooled session gets), written by migrate
        with psycopg.connect(direct_url(postgres, name), autocommit=True) as conn:
            assert conn.execute("SHOW statement_timeout").fetchone()[0] == "30s"
            assert conn.execute("SHOW lock_timeout").fetchone()[0] == "5s"
    finally:
        if stack is not None:
            stack.stop()
        if bouncer is not None:
            bouncer.stop()


def test_bin_dev_through_pgbouncer_without_saying_so_stops_and_names_the_setting(postgres, redis7, tmp_path):
    require_debian("pgbouncer")
    # given PgBouncer in front and nothing telling the system so
    name = owned_database(postgres)
    bouncer = PgBouncer(free_port(), postgres.port, {APP: APP_PASSWORD}, (name,))
    bouncer.start()
    try:
        env = {**os.environ, "DATABASE_URL": bouncer.url(APP, name), "REDIS_URL": redis7.url(),
               "PORT": str(free_port()), "MEDIA_DIR": str(tmp_path / "media"),
               "SECRET_KEY": "servers-test-secret-0123456789abcdefghij", "DEV_DATA_DIR": str(tmp_path / "dev")}
        env.pop("DB_POOLER", None)
        # when bin/dev starts, then it stops at once with exit code 2, naming the setting that fixes it
        done = subprocess.run([sys.executable, "-m", "bin.devstack"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "DB_POOLER=pgbouncer" in done.stderr and "unsupported startup parameter" in done.stderr
        assert APP_PASSWORD not in done.stdout + done.stderr
    finally:
        bouncer.stop()


@pytest.mark.parametrize("process", ["web", "worker-image", "dispatcher"])
def test_each_procfile_process_refuses_a_pooler_it_was_not_told_of_and_exits_2(postgres, redis7, tmp_path, process):
    require_debian("pgbouncer")
    name = owned_database(postgres)
    bouncer = PgBouncer(free_port(), postgres.port, {APP: APP_PASSWORD}, (name,))
    bouncer.start()
    try:
        command = dict(devstack.read_procfile())[process]
        env = {**devstack.process_env(dict(os.environ), settings.load({"PORT": str(free_port())})),
               "DATABASE_URL": bouncer.url(APP, name), "REDIS_URL": redis7.url(),
               "SECRET_KEY": "servers-test-secret-0123456789abcdefghij", "MEDIA_DIR": str(tmp_path / "media")}
        env.pop("DB_POOLER", None)
        done = subprocess.run(["/bin/sh", "-c", f"exec {command}"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=90)
        assert done.returncode == 2, (process, done.returncode, done.stderr[-2000:])
        assert "DB_POOLER=pgbouncer" in done.stderr and APP_PASSWORD not in done.stderr
    finally:
        bouncer.stop()
