import pytest

from tests.fakeprovider import FakeProviderServer
from tests.system import System


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def system(database_url, redis_url, tmp_path, fake):
    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(tmp_path / "media"),
           "LEASE_SECONDS": "3", "HEARTBEAT_SECONDS": "0.5", "BACKOFF_BASE_SECONDS": "0.1",
           "BACKOFF_CAP_SECONDS": "0.5", "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
           "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": fake.base_url, "IMAGE_API_KEY": "sk-test-image",
           "IMAGE_MODEL": "fake-image", "IMAGE_READ_TIMEOUT": "2", "IMAGE_CONNECT_TIMEOUT": "1",
           "TTS_PROVIDER": "openai", "TTS_BASE_URL": fake.base_url, "TTS_API_KEY": "sk-test-tts",
           "TTS_MODEL": "fake-tts", "TTS_VOICE": "alloy", "TTS_READ_TIMEOUT": "2", "TTS_CONNECT_TIMEOUT": "1"}
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System(env, logs)
    yield running
    running.stop()
