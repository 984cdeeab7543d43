"""Every command in bin/ works wherever it is started: from a checkout by hand, from cron with a bare
environment (the checkout's .venv found by the command itself), and answers --help with its usage."""

import os
import subprocess

import pytest

from pipeline import keys
from pipeline.db import connect
from testkit.system import ROOT

COMMANDS = sorted(p.name for p in (ROOT / "bin").iterdir()
                  if p.is_file() and os.access(p, os.X_OK) and not p.name.startswith("_") and p.suffix == "")


def test_every_command_is_listed():
    assert COMMANDS == ["batches", "bulk", "dev", "dispatch", "drill", "import", "keys", "migrate", "reconcile", "rq",
                        "rq-dashboard", "soak", "test", "webhooks", "workers"]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_answers_help_from_a_bare_environment_as_cron_starts_it(command, tmp_path):
    # cron's environment: no virtualenv on PATH, no PYTHONPATH, started from another directory
    done = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", str(ROOT / "bin" / command), "--help"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "usage" in done.stdout.lower(), done.stdout
    assert "Traceback" not in done.stderr, done.stderr


def test_keys_create_from_a_bare_environment_makes_a_key_that_signs_in(database_url, tmp_path):
    # the command docs/web.md gives admins, as they would type it (or cron would run it) with a bare PATH
    done = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"DATABASE_URL={database_url}",
                           str(ROOT / "bin" / "keys"), "create", "--owner", "ops@example.com", "--role", "editor"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    token = done.stdout.strip().splitlines()[-1]
    with connect(database_url, autocommit=True) as conn:
        found = keys.authenticate(conn, token)
    assert found is not None and found.owner == "ops@example.com" and found.role == "editor"


def test_bulk_pauses_and_resumes_the_bulk_lane_and_refuses_what_does_not_apply(database_url, tmp_path):
    def bulk(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"DATABASE_URL={database_url}",
                               str(ROOT / "bin" / "bulk"), *argv], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)

    assert bulk("status").stdout.strip() == "the bulk lane runs; 0 tasks wait for a worker"
    refused = bulk("resume", "--by", "ops@example.com")
    assert refused.returncode == 1 and "not paused" in refused.stderr
    paused = bulk("pause", "--by", "ops@example.com")
    assert paused.returncode == 0, paused.stdout + paused.stderr
    again = bulk("pause", "--by", "someone-else")
    assert again.returncode == 1 and "paused already" in again.stderr and "ops@example.com" in again.stderr
    assert "paused since" in bulk("status").stdout
    resumed = bulk("resume", "--by", "ops@example.com")
    assert resumed.returncode == 0 and "resumed the bulk lane after" in resumed.stdout
    with connect(database_url, autocommit=True) as conn:
        rows = conn.execute("SELECT paused_by, resumed_by, resumed_at IS NOT NULL AS ended FROM lane_pauses").fetchall()
    assert rows == [{"paused_by": "ops@example.com", "resumed_by": "ops@example.com", "ended": True}]


@pytest.mark.parametrize("argv", [["bin/dispatch", "--once"], [".venv/bin/rq", "worker-pool", "-c", "bin.rqconfig",
                                                                "-w", "bin.worker.Worker", "-n", "1", "image"]])
def test_a_shut_down_model_stops_a_process_at_start_naming_its_date_and_replacement(argv, database_url, redis_url):
    # given: a user still on the model OpenAI shut down on 2026-10-23
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "DATABASE_URL": database_url, "REDIS_URL": redis_url,
           "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.openai.com/v1", "IMAGE_API_KEY": "sk-test",
           "IMAGE_DAILY_BUDGET": "5", "IMAGE_MODEL": "gpt-image-1"}
    # when: a process starts
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    # then: it stops at once with exit 2 and says what to do, before it could pay for anything
    assert done.returncode == 2, done.stdout + done.stderr
    assert "IMAGE_MODEL='gpt-image-1'" in done.stderr and "2026-10-23" in done.stderr, done.stderr
    assert "gpt-image-2.5-sunburst" in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("command", [["dispatch", "--once"], ["reconcile", "--once"]])
def test_a_command_that_sends_messages_without_redis_url_says_so_instead_of_a_traceback(command, database_url,
                                                                                        tmp_path):
    done = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", f"DATABASE_URL={database_url}",
                           str(ROOT / "bin" / command[0]), *command[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "REDIS_URL is not set" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
