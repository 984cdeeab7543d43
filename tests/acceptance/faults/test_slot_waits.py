"""Waiting for a call slot, through real workers and the dispatcher: a task that finds every slot taken is
claimed again only when a slot frees (a call's end wakes it; no polling), and the slot a killed worker held
frees with the recovery of its attempt, not minutes later when the slot's hold runs out."""

import pytest

from pipeline import versions
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, draft, wait_until
from testkit.system import ROOT, kill, spawn
from testkit.crashes import worker_in_the_middle_of_an_image_call

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def image_tasks(system, content_id: int) -> list[dict]:
    with system.db() as conn:
        return conn.execute("SELECT id, status::text AS status, attempts FROM tasks "
                            "WHERE content_id = %s AND kind = 'image' ORDER BY id", (content_id,)).fetchall()


def slot_waits(system, ids: list[int]) -> int:
    with system.db() as conn:
        return conn.execute("SELECT count(*) AS n FROM events WHERE task_id = ANY(%s) AND to_status = 'retry' "
                            "AND details->>'error_class' = 'SlotsBusy'", (ids,)).fetchone()["n"]


def test_tasks_behind_one_slot_are_each_parked_once_and_woken_by_the_call_before_them(system, fake):
    # one slot, three image workers, calls of 2 s; SLOT_WAIT_SECONDS keeps its 60 s and the dispatcher does no
    # scan, so only the end of each call can wake the next task in time
    one = system.with_env(IMAGE_MAX_CONCURRENCY="1", IMAGE_READ_TIMEOUT="10", RECOVERY_SCAN_SECONDS="0")
    fake.set_default(Behaviour("delay", seconds=2))
    for _ in range(3):
        one.start_worker("image")
    with one.db() as conn:
        saved = versions.save(conn, draft(3), one.cfg, by=EDITOR)
    spawn(one, [str(ROOT / "bin" / "dispatch")], "dispatcher")
    wait_until(lambda: all(t["status"] == "succeeded" for t in image_tasks(one, saved.content_id)), timeout=40,
               message="the three images made one after another")
    ids = [t["id"] for t in image_tasks(one, saved.content_id)]
    # each task behind the slot waited once (a poll every second would park them about six times in all)
    assert 1 <= slot_waits(one, ids) <= 2
    assert [t["attempts"] for t in image_tasks(one, saved.content_id)] == [1, 1, 1]   # waiting spent no attempt
    assert fake.max_in_flight("image") == 1


def test_the_slot_of_a_worker_killed_mid_call_frees_with_its_attempts_recovery_and_wakes_the_waiter(system, fake):
    one = system.with_env(IMAGE_MAX_CONCURRENCY="1", IMAGE_READ_TIMEOUT="30", RECOVERY_SCAN_SECONDS="0.5")
    with one.db() as conn:
        first = versions.save(conn, draft(1, prefix="first"), one.cfg, by=EDITOR)
    dead = worker_in_the_middle_of_an_image_call(one, fake)
    with one.db() as conn:
        second = versions.save(conn, draft(1, prefix="second"), one.cfg, by=EDITOR)
        held = conn.execute("SELECT held_until, held_until - now() AS left FROM provider_slots "
                            "WHERE holder IS NOT NULL").fetchone()
    one.start_worker("image")
    one.dispatch()
    waiter = image_tasks(one, second.content_id)[0]
    wait_until(lambda: slot_waits(one, [waiter["id"]]) >= 1, message="the second image waiting for the slot")
    kill(dead)
    fake.release()
    spawn(one, [str(ROOT / "bin" / "dispatch")], "dispatcher")
    # the lease runs out (3 s), the dispatcher's scan decides the attempt and frees its slot, the waiter runs:
    # all before the slot's own hold (the call timeout + 30 s) would end, and so before the wait's timer (60 s from
    # later still). Judged by the server's clock against the hold, not by how long a busy machine took: the wait
    # outlasts both, so a slot freed only by its hold running out fails below, naming the times.
    wait_until(lambda: one.task(waiter["id"])["status"] == "succeeded", timeout=90,
               message="the waiter running once the dead worker's attempt was decided")
    assert held["left"].total_seconds() > 25
    with one.db() as conn:
        succeeded_at = conn.execute("SELECT max(at) AS at FROM events WHERE task_id = %s AND to_status = 'succeeded'",
                                    (waiter["id"],)).fetchone()["at"]
    assert succeeded_at < held["held_until"], (succeeded_at, held["held_until"])
    assert one.task(image_tasks(one, first.content_id)[0]["id"])["status"] == "unknown"
    assert slot_waits(one, [waiter["id"]]) == 1
