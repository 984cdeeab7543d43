"""A deploy stops workers with SIGTERM: the call in flight finishes, once, and nothing is left unknown."""

from __future__ import annotations

import signal
import threading

import pytest
import redis
from rq import Worker

from testkit.fakeprovider import Behaviour
from testkit.helpers import wait_until


@pytest.mark.parametrize("command", ["worker-pool", "worker"])
def test_sigterm_mid_call_lets_the_call_finish_once_and_the_task_succeed(system, fake, command):
    # given: the Procfile's pool (or one stock worker) with a provider call held in flight
    system = system.with_env(IMAGE_READ_TIMEOUT="10")
    fake.set_default(Behaviour("hold", seconds=30))
    argv = ["-m", "rq.cli", command, "--quiet", "-w", "bin.worker.Worker", "--url", system.env["REDIS_URL"]]
    argv += ["-n", "2"] if command == "worker-pool" else []
    worker = system._spawn([*argv, "image", "image-bulk"], f"stop-{command}")
    system.workers.append(worker)
    _, image_id = system.save_lesson()
    system.dispatch()
    wait_until(lambda: fake.in_flight("image") == 1, timeout=30, message="the image call in flight")
    # every worker of the pool started (the stop is of a running pool, not one still starting its workers)
    client = redis.Redis.from_url(system.env["REDIS_URL"])
    wait_until(lambda: len(Worker.all(connection=client)) == (2 if command == "worker-pool" else 1), timeout=30,
               message="the pool's workers registered")
    client.close()
    # when: the platform stops the worker; more work arrives; the provider answers 2 s later
    worker.send_signal(signal.SIGTERM)
    _, queued_id = system.save_lesson(prefix="later")
    system.dispatch()
    threading.Timer(2.0, fake.release).start()
    # then: the call in flight finished once and its task succeeded, the worker exited by itself,
    # and it took no new job on its way out
    row = system.wait_status(image_id, "succeeded", "unknown", "retry", timeout=30)
    assert row["status"] == "succeeded"
    assert worker.wait(timeout=30) is not None
    assert len([r for r in fake.recorded if r.endpoint == "image"]) == 1
    assert system.task(queued_id)["status"] == "ready"
