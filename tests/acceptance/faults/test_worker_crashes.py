"""A real `rq worker` killed with SIGKILL at each point of a task's life, then the reconciler."""

import signal

import pytest

from receipts.calls import ReceiptBook
from testkit.helpers import wait_until
from testkit.crashes import (key_of, killed_after_the_result_receipt_is_recovered_from_it,
                             one_block_through_real_workers, save_one_block,
                             worker_in_the_middle_of_an_image_call)
from testkit.system import drain, kill


def test_a_lesson_runs_through_real_worker_processes_with_one_call_per_task(system, fake):
    (image, tts, bundle), rows = one_block_through_real_workers(system)
    assert fake.calls_for(key_of(image)).executions == 1 and fake.calls_for(key_of(tts)).executions == 1


@pytest.mark.server_major
def test_killed_before_its_claim_the_lost_message_is_sent_again_and_runs_once(system, fake):
    saved, (image, tts, bundle) = save_one_block(system)
    system.dispatch()
    # given a worker stuck right before its claim (the tasks table is locked)
    with system.holding("LOCK TABLE tasks IN EXCLUSIVE MODE"):
        worker = system.start_worker("image")
        system.listening(worker)
        system.waiting_on_lock()
        # when it is killed there, with the message already taken from Redis
        kill(worker)
    assert system.task(image["id"])["attempts"] == 0
    # once new workers listen (a message re-sent before then could wait past LOST_DISPATCH_SECONDS and be sent
    # a third time)
    system.listening(system.start_worker("image"), system.start_worker("tts"), system.start_worker("bundle"))
    rows = drain(system, saved.content_id)
    # then the reconciler re-sent it, and the provider ran it once
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    with system.db() as conn:
        sent = conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NOT NULL",
                            (image["id"],)).fetchone()["n"]
    assert sent == 2   # dispatches and attempts are separate numbers
    assert fake.calls_for(key_of(image)).requests == 1


@pytest.mark.server_major
def test_killed_after_its_claim_before_the_intent_the_task_is_retried_and_called_once(system, fake):
    saved, (image, tts, bundle) = save_one_block(system)
    workers = []
    with system.holding_after_the_claim(lambda: (workers.append(system.start_worker("image")), system.dispatch())):
        system.wait_status(image["id"], "running")
        kill(workers[0])
    assert ReceiptBook(system.cfg.media_dir).intent(image["id"], 1) is None
    system.start_worker("image"), system.start_worker("tts"), system.start_worker("bundle")
    rows = drain(system, saved.content_id)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    assert system.task(image["id"])["attempts"] == 2
    assert fake.calls_for(key_of(image)).requests == 1


def test_killed_after_the_intent_without_a_lookup_the_task_becomes_unknown_and_is_not_called_again(system, fake):
    saved, (image, tts, bundle) = save_one_block(system)
    worker = worker_in_the_middle_of_an_image_call(system, fake)
    kill(worker)
    fake.release()
    assert ReceiptBook(system.cfg.media_dir).intent(image["id"], 1) is not None
    row = wait_until(lambda: system.reconcile() and (r := system.task(image["id"]))["status"] != "running" and r,
                     timeout=30, message="the reconciler deciding")
    assert row["status"] == "unknown" and "outcome is unknown" in row["last_error"]
    for _ in range(3):
        system.reconcile(), system.dispatch()
    assert system.task(image["id"])["status"] == "unknown"
    assert fake.calls_for(key_of(image)).requests == 1


def test_killed_after_the_result_receipt_the_task_succeeds_from_the_receipt(system, fake):
    killed_after_the_result_receipt_is_recovered_from_it(system, fake, ReceiptBook(system.cfg.media_dir))


@pytest.mark.server_major
def test_a_stalled_worker_that_resumes_after_a_takeover_writes_nothing(system, fake):
    saved, (image, tts, bundle) = save_one_block(system)
    workers = []
    with system.holding_after_the_claim(lambda: (workers.append(system.start_worker("image")), system.dispatch())):
        stale = workers[0]
        system.wait_status(image["id"], "running")
        stale.send_signal(signal.SIGSTOP)
        # its check before the call gives up waiting (lock timeout) while it is stopped: resumed, it cannot
        # confirm its lease and does not call
        wait_until(lambda: system.sessions_waiting_on_locks() == 0, timeout=30, message="the check's lock timeout")
    # the lease expires, the reconciler retries the task and another worker completes it
    system.start_worker("image"), system.start_worker("tts"), system.start_worker("bundle")
    drain(system, saved.content_id)
    done = system.task(image["id"])
    assert done["status"] == "succeeded" and done["attempts"] == 2
    stale.send_signal(signal.SIGCONT)
    wait_until(lambda: "lease_lost_nothing_written" in "".join(
        p.read_text() for p in system.logs.glob("worker-image-*.log")), message="the stale worker's refusal")
    after = system.task(image["id"])
    assert (after["status"], after["asset_sha256"], after["attempts"]) == ("succeeded", done["asset_sha256"], 2)
    assert fake.calls_for(key_of(image)).requests == 1
