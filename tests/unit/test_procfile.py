"""The Procfile is the one list of what runs: RQ's own command line for the workers, pools sized to
the provider's concurrency, and bin/dev running exactly its lines."""

import os
import shlex
import subprocess
import sys

import pytest

from bin import devstack
from pipeline import settings
from pipeline.core import kinds, lanes
from pipeline.core.errors import ConfigError

KINDS = {f"worker-{kind}": kind for kind in kinds.names()}
INTERACTIVE = {f"{name}-interactive": kind for name, kind in KINDS.items()
               if lanes.interactive_workers(settings.load({}), kind)}


def argv_of(command: str, env: dict[str, str]) -> list[str]:
    """The argv `sh` runs for a Procfile command line in this environment."""
    script = f"set -- {command}; for a in \"$@\"; do printf '%s\\0' \"$a\"; done"
    out = subprocess.run(["/bin/sh", "-c", script], env={"PATH": os.defpath, **env}, capture_output=True,
                         check=True, cwd=devstack.ROOT).stdout
    return out.decode().split("\0")[:-1]


def test_the_procfile_lists_the_web_app_one_worker_pool_per_kind_and_the_dispatcher():
    assert [name for name, _ in devstack.read_procfile()] == [
        "web", "worker-image", "worker-image-interactive", "worker-tts", "worker-tts-interactive", "worker-bundle",
        "worker-bundle-interactive", "worker-video", "worker-webhook", "dispatcher", "batcher"]


@pytest.mark.parametrize("name", sorted({**KINDS, **INTERACTIVE}))
def test_workers_are_rq_worker_pools_of_our_simple_workers_listening_interactive_first(name):
    command = dict(devstack.read_procfile())[name]
    argv = argv_of(command, {"REDIS_URL": "redis://127.0.0.1:6379/0"})
    assert argv[:2] == ["rq", "worker-pool"]
    assert argv[argv.index("-w") + 1] == "bin.worker.Worker"
    assert argv[argv.index("-c") + 1] == "bin.rqconfig"   # RQ's Redis URL comes from our settings
    if name in KINDS:   # both lanes, the interactive one first
        assert argv[argv.index("-n") + 2:] == lanes.worker_queues(KINDS[name])
    else:               # the interactive queue alone
        assert argv[argv.index("-n") + 2:] == [lanes.queue_name(INTERACTIVE[name])]


def test_the_webhook_pool_runs_our_webhook_workers_on_their_own_queue_sized_by_the_settings():
    command = dict(devstack.read_procfile())["worker-webhook"]
    for env, size in (({}, 2), ({"WEBHOOK_WORKERS": "5"}, 5)):
        argv = argv_of(command, {**env, "REDIS_URL": "redis://x"})
        assert argv[:2] == ["rq", "worker-pool"] and argv[argv.index("-c") + 1] == "bin.rqconfig"
        assert argv[argv.index("-w") + 1] == "bin.worker.WebhookWorker"
        assert int(argv[argv.index("-n") + 1]) == size == settings.load(env).webhooks.workers
        assert argv[argv.index("-n") + 2:] == ["webhook"]


@pytest.mark.slow   # nine shells, six of them starting bin/workers
def test_no_procfile_line_carries_a_secret_on_its_command_line():
    # `ps` shows every process's argv to every user of the machine: a password there is a password given away
    env = {"REDIS_URL": "redis://app:s3cret-redis@127.0.0.1:6379/0", "PORT": "8000",
           "DATABASE_URL": "postgresql://app:s3cret-pg@127.0.0.1/db"}
    for name, command in devstack.read_procfile():
        argv = argv_of(command, env)
        assert not any("s3cret" in arg for arg in argv), (name, argv)


@pytest.mark.slow   # six shells, each starting bin/workers
@pytest.mark.parametrize("env, sizes", [
    ({}, {"worker-image": 3, "worker-image-interactive": 1, "worker-tts": 3, "worker-tts-interactive": 1}),
    ({"IMAGE_MAX_CONCURRENCY": "6", "TTS_MAX_CONCURRENCY": "1"},
     {"worker-image": 5, "worker-image-interactive": 1, "worker-tts": 1, "worker-tts-interactive": 1}),
    ({"IMAGE_MAX_CONCURRENCY": "8", "IMAGE_INTERACTIVE_SLOTS": "3", "TTS_INTERACTIVE_SLOTS": "0"},
     {"worker-image": 5, "worker-image-interactive": 3, "worker-tts": 3, "worker-tts-interactive": 1}),
    ({"IMAGE_MAX_CONCURRENCY": "6", "IMAGE_WORKERS": "3", "TTS_WORKERS": "5", "BUNDLE_WORKERS": "2",
      "IMAGE_INTERACTIVE_WORKERS": "2", "BUNDLE_INTERACTIVE_WORKERS": "3"},
     {"worker-image": 3, "worker-image-interactive": 2, "worker-tts": 5, "worker-bundle": 2,
      "worker-bundle-interactive": 3}),
])
def test_pool_sizes_follow_the_providers_concurrency_and_interactive_slots_unless_set(env, sizes):
    # the shell's defaults in the Procfile and the settings' defaults say the same, and the figures are these
    cfg = settings.load(env)
    found = {}
    for name, command in devstack.read_procfile():
        if name in KINDS or name in INTERACTIVE:
            argv = argv_of(command, {**env, "REDIS_URL": "redis://x"})
            found[name] = int(argv[argv.index("-n") + 1])
            wanted = (lanes.workers(cfg, KINDS[name]) if name in KINDS
                      else lanes.interactive_workers(cfg, INTERACTIVE[name]))
            assert found[name] == wanted, (name, env)
    assert {name: found[name] for name in sizes} == sizes


def test_the_bulk_lane_may_not_take_the_interactive_slots_and_keeps_at_least_one():
    assert (settings.load({}).providers["image"].bulk_slots, settings.load({"IMAGE_MAX_CONCURRENCY": "1"}).providers["image"].bulk_slots) == (3, 1)
    with pytest.raises(ConfigError, match="IMAGE_INTERACTIVE_SLOTS=4 leaves the bulk lane no call slot"):
        settings.load({"IMAGE_INTERACTIVE_SLOTS": "4"})
    with pytest.raises(ConfigError, match="TTS_INTERACTIVE_SLOTS=1 leaves the bulk lane no call slot"):
        settings.load({"TTS_MAX_CONCURRENCY": "1", "TTS_INTERACTIVE_SLOTS": "1"})


def test_worker_pool_sizes_are_validated_like_every_setting():
    with pytest.raises(ConfigError, match="IMAGE_WORKERS=0 is out of range"):
        settings.load({"IMAGE_WORKERS": "0"})
    with pytest.raises(ConfigError, match="BULK_QUEUE_DEPTH='many' is not a whole number"):
        settings.load({"BULK_QUEUE_DEPTH": "many"})


def test_the_bulk_queues_hold_twice_what_the_workers_of_a_kind_can_take_unless_set():
    assert lanes.bulk_depths(settings.load({})) == {"image": 8, "tts": 8, "video": 2, "bundle": 2}
    assert lanes.bulk_depths(settings.load({"IMAGE_MAX_CONCURRENCY": "10"}))["image"] == 20
    assert set(lanes.bulk_depths(settings.load({"BULK_QUEUE_DEPTH": "3"})).values()) == {3}


def test_bin_dev_runs_the_procfiles_own_lines_and_the_reconciler_cron_runs_in_production():
    children = devstack.processes()
    expected = [(name, ["/bin/sh", "-c", f"exec {command}"]) for name, command in devstack.read_procfile()]
    assert [(c.name, c.argv) for c in children] == expected + [
        ("reconciler", ["/bin/sh", "-c", "exec bin/reconcile --loop 10"])]


def test_bin_dev_gives_the_lines_its_servers_its_port_and_the_virtualenv():
    cfg = settings.load({"PORT": "28001"})
    env = devstack.process_env({"PATH": "/usr/bin", "DATABASE_URL": "postgresql://d", "REDIS_URL": "redis://r"}, cfg)
    assert env["PORT"] == "28001" and env["WEB_HOST"] == "127.0.0.1"
    assert env["PATH"].split(os.pathsep)[0] == os.path.dirname(sys.executable)
    web = argv_of(dict(devstack.read_procfile())["web"], env)
    assert web[:5] == ["gunicorn", "-c", "bin/gunicorn_conf.py", "--bind", "127.0.0.1:28001"]
    assert shlex.join(web[-1:]) == "'web:create_app()'"


def test_a_malformed_procfile_line_is_refused_naming_the_line(tmp_path):
    procfile = tmp_path / "Procfile"
    procfile.write_text("web: gunicorn app\n# a comment\n\nworker rq worker\n")
    with pytest.raises(ValueError, match="Procfile line 4: expected 'name: command'"):
        devstack.read_procfile(procfile)
