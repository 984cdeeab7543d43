"""Pytest fixtures for the web app: an app on this test's database, served on a real port if asked, keys per role,
and in-process work.

A plugin of the test suite (tests/conftest.py `pytest_plugins`), so the integration tests of the
web and the acceptance tests that drive it over HTTP share one definition."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue
from werkzeug.serving import make_server

from bin.embedded import free_port
from pipeline import dispatch, keys, runtime
from pipeline.db import connect
from pipeline.core.lanes import all_queues
from receipts.media import MediaStore
from testkit.helpers import ControlledExecutor, lesson, work_burst
from web import create_app
from web.db import close_pool

TEST_SECRET = "test-only-secret-key-0123456789abcdefghij"
TEST_ENV = {"SECRET_KEY": TEST_SECRET, "DEMO_MODE": "true", "LEASE_SECONDS": "5",
            "HEARTBEAT_SECONDS": "1", "BACKOFF_BASE_SECONDS": "0.2", "BACKOFF_CAP_SECONDS": "1",
            "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
            "VIDEO_ENABLED": "false"}   # the lesson video's own tests turn it on


_APPS: list = []   # apps made by the running test, whose connection pools close when it ends


def make_app(database_url: str, redis_url: str, media_dir: Path | None = None, **env: str):
    media = {"MEDIA_DIR": str(media_dir)} if media_dir is not None else {}
    app = create_app({"DATABASE_URL": database_url, "REDIS_URL": redis_url, **media, **TEST_ENV, **env})
    app.config["TESTING"] = True
    _APPS.append(app)
    return app


@pytest.fixture(autouse=True)
def _close_app_pools():
    yield
    while _APPS:
        close_pool(_APPS.pop())


@pytest.fixture
def media_dir(tmp_path):
    return tmp_path / "media"


@pytest.fixture
def app(database_url, redis_url, media_dir):
    return make_app(database_url, redis_url, media_dir)


@pytest.fixture
def server(app):
    """The app on a real port of 127.0.0.1, served by a thread of this process; its base URL."""
    httpd = make_server("127.0.0.1", free_port(), app, threaded=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_port}"
    httpd.shutdown()
    thread.join(10)


@pytest.fixture
def conn(database_url):
    with connect(database_url, autocommit=True) as c:
        yield c


@pytest.fixture
def tokens(conn) -> dict[str, str]:
    """One live key per role, named after the role's holder."""
    return {role: keys.create(conn, f"{role}@example.com", role)[1] for role in keys.ROLES}


@dataclass
class Api:
    """The test client with an API key per call; `as_` picks the role."""

    client: object
    tokens: dict[str, str]

    def call(self, method: str, path: str, *, role: str | None = "admin", **kw):
        headers = dict(kw.pop("headers", {}) or {})
        if role:
            headers["X-API-Key"] = self.tokens[role]
        return self.client.open(path, method=method, headers=headers, **kw)

    def get(self, path: str, **kw):
        return self.call("GET", path, **kw)

    def post(self, path: str, **kw):
        return self.call("POST", path, **kw)

    def put(self, path: str, **kw):
        return self.call("PUT", path, **kw)

    def create(self, n: int = 2, *, role: str = "editor", **kw) -> dict:
        response = self.post("/api/contents", json=lesson(n), role=role, **kw)
        assert response.status_code == 202, response.json
        return response.json

    def owned_asset(self, conn, sha256: str, *, role: str = "editor") -> dict:
        """A content saved with `role`'s key whose image task names the stored asset `sha256` as its medium, as a
        finished one would: a key sees a stored medium only through a content of its team (web/media.py)."""
        created = self.create(1, role=role)
        conn.execute("UPDATE tasks SET asset_sha256 = %s WHERE content_id = %s AND kind = 'image'",
                     (sha256, created["content_id"]))
        return created

    def delivered(self, work: "Work", n: int = 1) -> tuple[dict, dict]:
        """A content saved by an editor, made, approved by a reviewer: (the save's answer, the delivery manifest)."""
        created = self.create(n)
        work.until_idle()
        approved = self.approve(created)
        assert approved.status_code == 200, approved.json
        return created, self.delivery(created, role="reviewer").json

    def tasks_of(self, created: dict) -> dict[str, dict]:
        """The version's tasks by "kind:block"."""
        body = self.get(created["status_url"]).json
        return {f"{t['kind']}:{t['block'] or ''}": t for t in body["tasks"]}

    def approve(self, created: dict, role: str = "reviewer"):
        return self.post(created["status_url"] + "/approve", role=role)

    def delivery(self, created: dict, role: str = "editor"):
        return self.get(f"/api/contents/{created['content_id']}/delivery", role=role)

    def scrape(self) -> dict[tuple[str, tuple], float]:
        """/metrics as (name, labels) -> value, after checking it is Prometheus's text format."""
        response = self.client.get("/metrics")
        assert response.status_code == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        samples = {}
        for family in text_string_to_metric_families(response.data.decode()):
            for sample in family.samples:
                samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
        return samples


@pytest.fixture
def api(app, tokens):
    return Api(app.test_client(), tokens)


@dataclass
class Work:
    """Runs queued tasks in this process with RQ's SimpleWorker and a scripted executor."""

    settings: object
    executor: ControlledExecutor
    rt: runtime.Runtime

    def send(self) -> int:
        with connect(self.settings.database_url, autocommit=True) as c:
            return dispatch.send_due(c, redis.Redis.from_url(self.settings.redis_url), claim_seconds=2)

    def until_idle(self, rounds: int = 5) -> None:
        """Send what is due and run it, until nothing is due (a retry waits for its time)."""
        for _ in range(rounds):
            queued = sum(len(Queue(q, connection=self.rt.redis)) for q in all_queues())
            if not self.send() and not queued:
                return
            work_burst(self.rt)


@pytest.fixture
def work(app, media_dir):
    cfg = app.config["SETTINGS"]
    executor = ControlledExecutor(MediaStore(media_dir))
    rt = runtime.Runtime(cfg, executor, worker_id="test-worker")
    yield Work(cfg, executor, rt)
    runtime.install(None)


def api_and_work(database_url: str, redis_url: str, media_dir: Path, tokens: dict[str, str],
                 providers: bool = False, **env: str) -> tuple[Api, Work]:
    """An app with these settings, its API client, and in-process work by a scripted ControlledExecutor, or
    (`providers`) by the configured providers as a worker runs them: for a test that needs settings of its own."""
    app = make_app(database_url, redis_url, media_dir, **env)
    cfg = app.config["SETTINGS"]
    rt = runtime.with_providers(cfg, worker_id="w") if providers else runtime.Runtime(
        cfg, ControlledExecutor(MediaStore(media_dir)), worker_id="w")
    return Api(app.test_client(), tokens), Work(cfg, rt.executor, rt)
