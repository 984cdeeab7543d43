"""Every attempt ends: a call that would outlast the attempt's ceiling is given up and its task is unknown."""

from __future__ import annotations

import time

from testkit.fakeprovider import Behaviour
from testkit.helpers import wait_until


def test_a_call_outlasting_the_attempt_ceiling_is_given_up_and_the_worker_lives_on(system, fake):
    # given: generous call timeouts, but attempts may last 3 s; the provider holds the call for 30 s
    capped = system.with_env(ATTEMPT_CEILING_SECONDS="3", IMAGE_CALL_TIMEOUT="60", IMAGE_READ_TIMEOUT="60")
    worker = capped.start_worker("image")
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    _, image_id = capped.save_lesson()
    capped.dispatch()
    wait_until(lambda: fake.in_flight("image") == 1, timeout=60, message="the call in flight")
    started = time.monotonic()
    # then: the worker gives the call up at the ceiling; the outcome is unknown, not repeated
    row = capped.wait_status(image_id, "unknown", timeout=30)
    assert time.monotonic() - started < 10
    assert row["attempts"] == 1 and "Ambiguous" in row["last_error"]
    assert worker.poll() is None
