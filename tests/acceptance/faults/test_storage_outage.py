"""A short outage of the store of receipts and media (a read-only directory, a full disk) is ridden out.

Real `rq worker` processes and the dispatcher run against the fake provider, which counts every call per
idempotency key. The outage is a real directory that refuses new entries (`testkit.helpers.unwritable`). Before a
call, the task waits for the store without spending its attempts, listed as needing attention and counted among
/metrics' waits, and no call is made without its intent receipt; after a paid call, the worker holds the result
until the store takes it (or until the attempt ends: then the task is unknown, never paid again unasked).
"""

from __future__ import annotations

import pytest

from pipeline import attention, overview, storage
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import Behaviour
from testkit.fakeprovider.behaviours import Calls
from testkit.helpers import unwritable, wait_until
from testkit.system import ROOT, drain, spawn

pytestmark = pytest.mark.slow


def key_of(row: dict) -> str:
    return idempotency_key(row["fingerprint"], row["id"])


def storage_waits(system) -> int:
    """/metrics' `mediapipe_task_waits{waiting_for="storage"}`, as the scrape reads it."""
    with system.db() as conn:
        return sum(int(row["n"]) for row in overview.gauges(conn)["waits"] if row["waiting_for"] == "storage")


def listed_for_storage(system, task_id: int) -> dict | None:
    """The attention list's entry of the task when it is listed as waiting for the store."""
    with system.db() as conn:
        items = attention.tasks(conn, team=None, problem="storage")["items"]
    return next((item for item in items if item["id"] == task_id), None)


def start(system, *queues: str) -> None:
    for queue in queues:
        system.start_worker(queue)
    spawn(system, [str(ROOT / "bin" / "dispatch")], "dispatcher")


def test_a_receipts_directory_that_refuses_writes_is_waited_out_and_each_input_is_paid_once(system, fake):
    # given: a store whose receipts directory refuses new entries (its identity was made before)
    storage.receipt_book(system.cfg).store_id()
    with unwritable(system.cfg.media_dir / "receipts"):
        start(system, "image", "tts", "bundle")
        content_id, image_id = system.save_lesson()
        # then: the image task waits for the store, again and again, more often than it has attempts, and never
        # spends one; nothing is sent to the provider without its intent receipt
        wait_until(lambda: storage_waits(system) > 2 * system.cfg.max_attempts, timeout=60,
                   message="the tasks waiting for the store more often than they have attempts")
        listed = wait_until(lambda: listed_for_storage(system, image_id), timeout=30,
                            message="the image task listed as waiting for the store")
        assert listed["status"] == "retry" and listed["last_error_code"] == "storage"
        assert "intent receipt" in listed["last_error"]
        row = system.task(image_id)
        assert row["status"] in ("retry", "running") and row["attempts"] <= 1
        assert fake.calls_for(key_of(row)).requests == 0
    # when: the directory takes writes again
    rows = drain(system, content_id, timeout=60)
    # then: every task succeeds, each input paid for exactly once, on its first attempt
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    for media in rows[:2]:
        assert fake.calls_for(key_of(media)) == Calls(1, 1) and media["attempts"] == 1
    assert listed_for_storage(system, image_id) is None


def test_a_paid_result_the_store_refuses_is_held_until_the_store_takes_it_and_never_paid_again(system, fake):
    # given: an image call in flight, its intent receipt written
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    start(system, "image")
    content_id, image_id = system.save_lesson()
    wait_until(lambda: fake.in_flight("image") == 1, timeout=60, message="the image call in flight")
    media = system.cfg.media_dir
    # when: the store stops taking writes (the task's receipts and the assets), and then the provider answers
    with unwritable(media / "receipts" / str(image_id)), unwritable(media / "assets"):
        waits = storage_waits(system)
        fake.release()
        # then: the worker holds the paid result under its lease: the task runs on, listed as waiting for the store
        listed = wait_until(lambda: listed_for_storage(system, image_id), timeout=30,
                            message="the running task listed as waiting for the store")
        assert listed["status"] == "running" and storage_waits(system) == waits + 1
        row = system.task(image_id)
        assert row["asset_sha256"] is None and storage.receipt_book(system.cfg).result(image_id, 1) is None
    # when: the store takes writes again
    row = system.wait_status(image_id, "succeeded", "unknown", "failed", timeout=30)
    # then: the held result is stored and the task succeeds, paid for once, its ledger row written once
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    assert storage.media_store(system.cfg).has(row["asset_sha256"], verify=True)
    assert storage.receipt_book(system.cfg).result(image_id, 1).sha256 == row["asset_sha256"]
    assert fake.calls_for(key_of(row)) == Calls(1, 1)
    with system.db() as conn:
        ledger = conn.execute("SELECT outcome FROM provider_calls WHERE task_id = %s", (image_id,)).fetchall()
    assert [r["outcome"] for r in ledger] == ["succeeded"]
    assert listed_for_storage(system, image_id) is None


def test_a_paid_result_the_store_refuses_past_its_attempts_end_is_unknown_and_its_input_stays_held(system, fake):
    # given: attempts that may last 4 s, and an image call in flight
    capped = system.with_env(ATTEMPT_CEILING_SECONDS="4")
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    start(capped, "image")
    content_id, image_id = capped.save_lesson()
    wait_until(lambda: fake.in_flight("image") == 1, timeout=60, message="the image call in flight")
    media = capped.cfg.media_dir
    with unwritable(media / "receipts" / str(image_id)), unwritable(media / "assets"):
        fake.release()
        # when: the store refuses the paid result until the attempt ends
        row = capped.wait_status(image_id, "unknown", "succeeded", "failed", timeout=30)
    # then: the task is unknown (only the provider knows its result), nothing was called twice, and the input stays
    # held, so no other task pays for it meanwhile
    assert row["status"] == "unknown" and "could not be stored" in row["last_error"]
    assert fake.calls_for(key_of(row)) == Calls(1, 1)
    with capped.db() as conn:
        held = conn.execute("SELECT task_id FROM input_calls WHERE fingerprint = %s", (row["fingerprint"],)).fetchone()
        ledger = conn.execute("SELECT outcome, cost FROM provider_calls WHERE task_id = %s", (image_id,)).fetchall()
    assert held["task_id"] == image_id and [r["outcome"] for r in ledger] == ["succeeded"]
