import pytest
import requests

from bin.embedded import Valkey, free_port
from pipeline import keys
from tests.helpers import wait_until
from tests.system import ROOT

from tests.fakeprovider import FakeProviderServer
from tests.system import System


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
           "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": fake.base_url, "IMAGE_API_KEY": "sk-test-image",
           "IMAGE_READ_TIMEOUT": "2", "IMAGE_CONNECT_TIMEOUT": "1",
           "TTS_PROVIDER": "openai", "TTS_BASE_URL": fake.base_url, "TTS_API_KEY": "sk-test-tts",
           "TTS_VOICE": "alloy", "TTS_READ_TIMEOUT": "2", "TTS_CONNECT_TIMEOUT": "1"}
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System(env, logs)
    yield running
    running.stop()


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


def spawn(system, argv, name):
    proc = system._spawn(argv, name)
    system.workers.append(proc)
    return proc


@pytest.fixture
def make_stack(system, tmp_path):
    started = []

    def make(**env) -> Stack:
        valkey = Valkey(tmp_path / f"redis-{len(started)}", free_port())
        valkey.start()
        running = system.with_env(REDIS_URL=valkey.url(), DEMO_MODE="false", **env)
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
        return built
    yield make
    system.stop()
    for built in started:
        built.valkey.stop()


@pytest.fixture
def stack(make_stack):
    return make_stack()


def settle(stack: Stack, content_id: int, timeout: float = 60, done=("succeeded", "failed", "unknown",
                                                                      "superseded", "cancelled")) -> list[dict]:
    """Wait (the stack's own dispatcher and reconciler run) until every task of the content is settled."""
    def rows():
        with stack.system.db() as conn:
            found = conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (content_id,)).fetchall()
        return found if found and all(r["status"] in done for r in found) else None
    return wait_until(rows, timeout=timeout, interval=0.2, message=f"content {content_id} settling")
