"""Fixtures of the browser tests: headless Chromium, where screenshots go, and one RQ worker process per queue
(forked from the fork server, which has the app imported: testkit/forkserver.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pipeline.core import kinds
from testkit import forkserver
from testkit.system import rq_worker_argv
from testkit.webapp import TEST_ENV
from testkit.webdriver import Chromium, Unavailable

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def shots(request, tmp_path) -> Path:
    """Where screenshots go: `--screenshots DIR` (e.g. docs/screenshots), else this test's temp folder."""
    chosen = request.config.getoption("screenshots")
    folder = Path(chosen).resolve() if chosen else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture
def chromium():
    try:
        browser = Chromium.start()
    except Unavailable as exc:
        pytest.skip(f"headless Chromium unavailable: {exc}")
    yield browser
    browser.quit()


@pytest.fixture
def workers(database_url, redis_url, media_dir, tmp_path):
    """One RQ worker process per queue, as the Procfile runs them, with the local providers."""
    env = {**os.environ, **TEST_ENV, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
           "MEDIA_DIR": str(media_dir), "PYTHONPATH": str(ROOT)}
    started = [forkserver.spawn(rq_worker_argv(queue), env, ROOT, tmp_path / "workers.log") for queue in kinds.names()]
    yield started
    for process in started:
        process.terminate()
    for process in started:
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
