import pytest

from pipeline import runtime
from pipeline.db import connect
from receipts.media import MediaStore
from testkit.helpers import ControlledExecutor, make_settings


@pytest.fixture
def cfg(database_url, redis_url, tmp_path):
    return make_settings(database_url, redis_url, tmp_path / "media")


@pytest.fixture
def conn(cfg):
    with connect(cfg.database_url, autocommit=True) as c:
        yield c


@pytest.fixture
def executor(cfg):
    return ControlledExecutor(MediaStore(cfg.media_dir))


@pytest.fixture
def rt(cfg, executor):
    r = runtime.Runtime(cfg, executor, worker_id="test-worker")
    runtime.install(r)
    yield r
    runtime.install(None)
