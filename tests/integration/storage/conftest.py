"""A process-level system (real rq workers, the fake provider) on either kind of store."""

import pytest

from testkit.system import System, system_env


@pytest.fixture
def system(database_url, redis_url, tmp_path, fake, storage_env):
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System({**system_env(database_url, redis_url, tmp_path / "media", fake.base_url), **storage_env}, logs)
    yield running
    running.stop()
