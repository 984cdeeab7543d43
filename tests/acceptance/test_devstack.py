import os
import signal
import socket
import stat
import subprocess
from pathlib import Path

import psycopg
import pytest
import redis
import requests
from psycopg.rows import dict_row

from bin import devstack
from bin.embedded import ServerError, Valkey, free_port
from pipeline.core import prices
from testkit.fakeprovider import FakeProviderServer
from testkit.fakeprovider.batch import usage
from testkit.helpers import wait_until
from testkit.system import ROOT


def test_starting_on_a_busy_port_fails_naming_the_port(monkeypatch, capsys):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        monkeypatch.setenv("PORT", str(port))
        assert devstack.main([]) == 2
    err = capsys.readouterr().err
    assert f"port {port} on 127.0.0.1 is busy" in err and "PORT=" in err


def test_a_second_valkey_on_a_taken_port_is_refused_and_the_first_keeps_running(tmp_path):
    first = Valkey(tmp_path / "a", free_port())
    first.start()
    try:
        with pytest.raises(ServerError, match=f"port {first.port} on 127.0.0.1 is busy"):
            Valkey(tmp_path / "b", first.port).start()
        assert first.process.poll() is None
    finally:
        first.stop()


def test_the_dev_valkey_with_a_password_refuses_strangers_and_keeps_the_password_off_its_command_line(tmp_path):
    password = "dev-valkey-password-0123456789"
    valkey = Valkey(tmp_path / "redis", free_port(), password=password)
    valkey.start()
    try:
        with pytest.raises(redis.AuthenticationError):
            redis.Redis(host="127.0.0.1", port=valkey.port, socket_timeout=2).ping()
        assert redis.Redis.from_url(valkey.url(), socket_timeout=2).ping()
        assert password not in (Path("/proc") / str(valkey.process.pid) / "cmdline").read_text()
        assert stat.S_IMODE((tmp_path / "redis" / "valkey.conf").stat().st_mode) == 0o600
    finally:
        valkey.stop()


def test_bin_dev_with_only_provider_url_key_and_budget_turns_a_lesson_into_paid_media(database_url, redis_url,
                                                                                      tmp_path):
    """The first thing a user with an OpenAI key tries, against the strict fake (which refuses shut-down models as
    the API does): default models, base URL with /v1, a daily budget, and spend priced from the catalogue."""
    port = free_port()
    admin_key = "lab-admin-key-for-the-dev-stack-test-0123456789"
    env = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "PORT": str(port),
           "MEDIA_DIR": str(tmp_path / "media"), "LAB_API_KEY": admin_key, "DEV_DATA_DIR": str(tmp_path / "dev"),
           "SECRET_KEY": "dev-stack-test-secret-0123456789-abcdefghijklmnop"}
    with FakeProviderServer() as fake:
        for prefix in ("IMAGE", "TTS"):
            env.update({f"{prefix}_PROVIDER": "openai", f"{prefix}_BASE_URL": f"{fake.base_url}/v1",
                        f"{prefix}_API_KEY": f"sk-{prefix.lower()}-dev-stack-test",
                        f"{prefix}_DAILY_BUDGET": "5"})
        log = open(tmp_path / "dev.log", "wb")
        dev = subprocess.Popen([str(ROOT / "bin" / "dev")], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                               start_new_session=True)
        try:
            base = f"http://127.0.0.1:{port}"
            wait_until(lambda: _answers(f"{base}/readyz"), timeout=120, message="bin/dev's web answering /readyz")
            # when: the seed demo's lesson is made (README: POST /api/jobs)
            saved = requests.post(f"{base}/api/jobs", json={"theme": "校园生活"}, timeout=10,
                                  headers={"X-API-Key": admin_key})
            assert saved.status_code == 202, saved.text
            content_id = saved.json()["content_id"]
            # then: every image and narration succeeds through the fake, with the backend's own models
            with psycopg.connect(database_url, row_factory=dict_row) as conn:
                wait_until(lambda: _all_succeeded(conn, content_id), timeout=120,
                           message="every task of the lesson succeeded")
            bodies = {(r.endpoint, r.body["model"]) for r in fake.recorded}
            assert bodies == {("image", "gpt-image-2.6-sunburst"), ("audio", "gpt-4o-mini-tts")}
            # and the day's spend shows both providers above 0: the image from the tokens its answer reported,
            # the narration from its minutes, each at the catalogue's prices
            spent = requests.get(f"{base}/api/spend", timeout=10, headers={"X-API-Key": admin_key}).json()
            by_provider = {p["provider"]: p for p in spent["providers"]}
            reported = [prices.image_reported("gpt-image-2.6-sunburst", usage(r.body))   # what the fake reported
                        for r in fake.recorded if r.endpoint == "image"]
            assert by_provider["openai-image"]["spent_today"] == pytest.approx(sum(reported), rel=1e-3)
            assert 0 < by_provider["openai-tts"]["spent_today"] < 0.01
            assert by_provider["openai-image"]["daily_budget"] == by_provider["openai-tts"]["daily_budget"] == 5
            # and: the demo's flow goes on to approval and delivery
            status_url = saved.json()["status_url"]
            approved = requests.post(f"{base}{status_url}/approve", timeout=10, headers={"X-API-Key": admin_key})
            assert approved.status_code == 200, approved.text
            delivered = requests.get(f"{base}/api/contents/{content_id}/delivery", timeout=10,
                                     headers={"X-API-Key": admin_key})
            assert delivered.status_code == 200 and delivered.json()["version"] == 1, delivered.text
        finally:
            os.killpg(dev.pid, signal.SIGINT)
            try:
                dev.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                raise
            log.close()


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _all_succeeded(conn, content_id: int) -> bool:
    rows = conn.execute("SELECT status FROM tasks WHERE content_id = %s", (content_id,)).fetchall()
    conn.commit()
    return bool(rows) and {r["status"] for r in rows} == {"succeeded"}
