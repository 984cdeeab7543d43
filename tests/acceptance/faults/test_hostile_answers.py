"""A provider that trickles or floods its answer cannot hold or swell a worker.

Real worker processes against the fake provider: the task whose answer trickles or
passes the byte cap ends `unknown` (the provider may have charged), the worker's
peak resident memory stays bounded, and the same worker process serves the next lesson.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import redis
from rq import Worker

from pipeline import versions
from pipeline.core.content import parse_draft
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, lesson, wait_until

PEAK_RSS_LIMIT_MB = 250


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set size (VmHWM), in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM line")


def image_task(system, content_id: int) -> dict:
    with system.db() as conn:
        return conn.execute("SELECT * FROM tasks WHERE content_id = %s AND kind = 'image'", (content_id,)).fetchone()


@pytest.mark.parametrize("behaviour", [
    Behaviour("trickle", seconds=0.5, endpoint="image"),
    Behaviour("huge", size=300 * 10**6, endpoint="image"),
    Behaviour("huge", size=300 * 10**6, declare=False, endpoint="image"),
], ids=["trickle", "300MB declared", "300MB undeclared"])
def test_a_hostile_answer_ends_its_task_unknown_and_the_same_worker_serves_the_next_lesson(system, fake, behaviour):
    # given: one image worker whose calls may take 4 s and answers hold at most 8 MiB
    system = system.with_env(IMAGE_CALL_TIMEOUT="4", IMAGE_MAX_BYTES=str(8 << 20), IMAGE_READ_TIMEOUT="3")
    worker = system.start_worker("image")
    fake.script(behaviour)
    with system.db() as conn:
        first = versions.save(conn, parse_draft(lesson(1)), system.cfg, by=EDITOR)
    started = time.monotonic()
    system.dispatch()
    # when / then: the task is unknown well within a minute, not retried
    task = system.wait_status(image_task(system, first.content_id)["id"], "unknown", timeout=60)
    assert time.monotonic() - started < 60
    assert task["attempts"] == 1
    # and the worker lives on, its memory bounded, and serves the next lesson
    with system.db() as conn:
        second = versions.save(conn, parse_draft(lesson(1, prefix="新")), system.cfg, by=EDITOR)
    system.dispatch()
    system.wait_status(image_task(system, second.content_id)["id"], "succeeded", timeout=30)
    assert worker.poll() is None
    peak = peak_rss_mb(worker.pid)
    print(f"\n{behaviour.action} declare={behaviour.declare}: worker peak RSS {peak:.1f} MiB")
    assert peak < PEAK_RSS_LIMIT_MB


def test_a_call_never_outlives_its_tasks_total_deadline(system, fake):
    # given: a generous call timeout but a version whose tasks must finish within 4 s
    system = system.with_env(IMAGE_CALL_TIMEOUT="120", IMAGE_READ_TIMEOUT="60", TASK_DEADLINE_SECONDS="4")
    system.start_worker("image")
    wait_until(lambda: Worker.all(connection=redis.Redis.from_url(system.env["REDIS_URL"])), timeout=60,
               message="the worker listening (a slow start must not eat the 4 s)")
    fake.script(Behaviour("trickle", seconds=0.5, endpoint="image"))
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), system.cfg, by=EDITOR)
    started = time.monotonic()
    system.dispatch()
    # then: the trickling call ends at the task's deadline, not the call's
    system.wait_status(image_task(system, saved.content_id)["id"], "unknown", timeout=30)
    assert time.monotonic() - started < 10
