"""A process-level system (real rq workers, the fake provider) on either kind of store."""

import pytest

from testkit.fakeprovider import FakeProviderServer
from testkit.system import System


def system_env(database_url: str, redis_url: str, media_dir, fake_url: str, storage_env: dict) -> dict:
    return {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media_dir),
            "SECRET_KEY": "test-only-secret-key-0123456789abcdefghij",
            "LEASE_SECONDS": "3", "HEARTBEAT_SECONDS": "0.5", "BACKOFF_BASE_SECONDS": "0.1",
            "BACKOFF_CAP_SECONDS": "0.5", "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
            "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": fake_url, "IMAGE_API_KEY": "sk-test-image", "IMAGE_DAILY_BUDGET": "unlimited",
            "IMAGE_READ_TIMEOUT": "2", "IMAGE_CONNECT_TIMEOUT": "1",
            "TTS_PROVIDER": "openai", "TTS_BASE_URL": fake_url, "TTS_API_KEY": "sk-test-tts", "TTS_DAILY_BUDGET": "unlimited",
            "TTS_VOICE": "alloy", "TTS_READ_TIMEOUT": "2", "TTS_CONNECT_TIMEOUT": "1", **storage_env}


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        yield server


@pytest.fixture
def system(database_url, redis_url, tmp_path, fake, storage_env):
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System(system_env(database_url, redis_url, tmp_path / "media", fake.base_url, storage_env), logs)
    yield running
    running.stop()
