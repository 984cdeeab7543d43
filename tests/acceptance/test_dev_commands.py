"""The documented bin/ commands beside a running bin/dev, from a second shell in the checkout that sets no variable
naming a server: bin/dev writes its stack's addresses to dev.env and the commands read it (bin/devenv.py). Without
bin/dev, each says in one line what is missing and exits 2.

bin/dev runs here with embedded PostgreSQL and Valkey of its own on free ports, its data (and dev.env) in a
folder of this test's (DEV_DATA_DIR), so a developer's own .data is never touched; whatever the session's
PostgreSQL major, bin/dev's is the embedded 18, so nothing here depends on the session's server.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
import requests

from bin import devenv
from bin.embedded import free_port
from pipeline import keys
from pipeline.db import connect
from testkit.helpers import wait_until
from testkit.system import ROOT

pytestmark = pytest.mark.slow
# What each command needs besides its name; every one of them talks to a server but bin/workers.
DOCUMENTED = [["keys", "create", "--owner", "ann@example.com", "--role", "editor"], ["keys", "list"],
              ["bulk", "status"], ["reconcile", "--once"], ["reconcile", "--slot"], ["dispatch", "--once"],
              ["migrate", "--check"], ["rq", "info", "image", "tts", "bundle"], ["batches", "--once"]]


def second_shell(data: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """A bin/ command as a person types it in another shell of the checkout: a bare environment."""
    env = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"), "DEV_DATA_DIR": str(data)}
    return subprocess.run([str(ROOT / "bin" / argv[0]), *argv[1:]], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


@pytest.fixture
def dev_data():
    # PostgreSQL runs as another user when we are root: the folder must be open to it, as the session's is
    folder = Path(tempfile.mkdtemp(prefix="mediapipe-dev-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("argv", [*DOCUMENTED, ["rq-dashboard"]])
def test_without_bin_dev_a_command_says_in_one_line_what_is_missing_and_exits_2(argv, dev_data):
    done = second_shell(dev_data, *argv)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not set: start bin/dev" in lines[0], done.stderr
    assert "Traceback" not in done.stderr


def test_the_documented_commands_work_as_typed_beside_a_running_bin_dev(dev_data, tmp_path):
    port = free_port()
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env |= {"PORT": str(port), "DEV_PG_PORT": str(free_port()), "DEV_REDIS_PORT": str(free_port()),
            "DEV_DATA_DIR": str(dev_data)}
    log = (tmp_path / "dev.log").open("wb")
    dev = subprocess.Popen([str(ROOT / "bin" / "dev")], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                           start_new_session=True)
    env_file = dev_data / "dev.env"
    try:
        # given: bin/dev up, its addresses written owner-only and printed
        wait_until(env_file.exists, timeout=180, interval=0.2, message="bin/dev writes dev.env")
        assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
        written = devenv.read(env_file)
        assert written["MEDIAPIPE_URL"] == f"http://127.0.0.1:{port}" and ":" in written["REDIS_URL"].split("@")[0]
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/readyz"), timeout=60, message="the web answers")
        printed = (tmp_path / "dev.log").read_text()
        assert f"web:        http://127.0.0.1:{port}/" in printed and "PostgreSQL: postgresql://" in printed
        assert "Redis:      redis://:***@127.0.0.1:" in printed and str(env_file) in printed
        # when: the documented commands run from a second shell that names no server
        for argv in DOCUMENTED:
            done = second_shell(dev_data, *argv)
            # then: each works, and says where its servers came from
            assert done.returncode == 0, (argv, done.stdout, done.stderr)
            assert f"using bin/dev's stack from {env_file}" in done.stderr, (argv, done.stderr)
            assert "Traceback" not in done.stderr
            if argv[:2] == ["keys", "create"]:
                token = done.stdout.strip().splitlines()[-1]
        with connect(written["DATABASE_URL"], autocommit=True) as conn:
            assert keys.authenticate(conn, token).owner == "ann@example.com"
        # and bin/import saves through the stack's web with its admin key
        lines = tmp_path / "one.jsonl"
        lines.write_text(json.dumps({"title": "导入", "locale": "zh-CN", "blocks": [{"key": "b1", "text": "一。"}]}))
        imported = second_shell(dev_data, "import", str(lines))
        assert imported.returncode == 0, imported.stdout + imported.stderr
        assert second_shell(dev_data, "workers", "image").returncode == 0
    finally:
        os.killpg(dev.pid, signal.SIGINT)
        try:
            dev.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(dev.pid, signal.SIGKILL)
            raise
        log.close()
    # once it stops, the file goes, and the commands say what is missing again
    assert not env_file.exists()
    assert second_shell(dev_data, "keys", "list").returncode == 2


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False
