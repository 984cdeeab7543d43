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
    assert COMMANDS == ["batches", "dev", "dispatch", "import", "keys", "migrate", "reconcile", "soak", "test"]


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
