"""Fixtures of the fault tests: the fake provider, a running system (workers as processes), whole stacks."""

import pytest
import redis
import requests
from rq import Worker

from bin.embedded import Valkey, free_port
from pipeline import keys
from testkit.fakeprovider import FakeProviderServer
from testkit.helpers import wait_until
from testkit.system import ROOT, Stack, System, spawn


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def system(database_url, redis_url, tmp_path, fake):
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(tmp_path / "media"),
           "SECRET_KEY": "test-only-secret-key-0123456789abcdefghij",
           "LEASE_SECONDS": "3", "HEARTBEAT_SECONDS": "0.5", "BACKOFF_BASE_SECONDS": "0.1",
           "BACKOFF_CAP_SECONDS": "0.5", "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
           "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": fake.base_url, "IMAGE_API_KEY": "sk-test-image", "IMAGE_DAILY_BUDGET": "unlimited",
           "IMAGE_READ_TIMEOUT": "2", "IMAGE_CONNECT_TIMEOUT": "1",
           "TTS_PROVIDER": "openai", "TTS_BASE_URL": fake.base_url, "TTS_API_KEY": "sk-test-tts", "TTS_DAILY_BUDGET": "unlimited",
           "TTS_VOICE": "alloy", "TTS_READ_TIMEOUT": "2", "TTS_CONNECT_TIMEOUT": "1"}
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System(env, logs)
    yield running
    running.stop()


@pytest.fixture
def make_stack(system, tmp_path):
    started = []

    def make(**env) -> Stack:
        valkey = Valkey(tmp_path / f"redis-{len(started)}", free_port())
        valkey.start()
        # one key saves and approves here: these tests are about faults; who may approve is tests/integration/web
        running = system.with_env(REDIS_URL=valkey.url(), DEMO_MODE="false", ALLOW_SELF_APPROVAL="true", **env)
        with running.db() as conn:
            _, token = keys.create(conn, f"editor-{len(started)}", "admin")
        built = Stack(running, valkey, free_port(), token)
        started.append(built)
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
        wait_until(healthy, timeout=30, message="the web app answering")
        # and every worker registered with RQ: a test that then takes Redis away finds them all started
        client = redis.Redis.from_url(valkey.url())
        wait_until(lambda: len(Worker.all(connection=client)) >= 3, timeout=60, message="the three workers started")
        client.close()
        return built
    yield make
    system.stop()
    for built in started:
        built.valkey.stop()


@pytest.fixture
def stack(make_stack):
    return make_stack()
