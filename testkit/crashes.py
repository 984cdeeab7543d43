"""Worker crash scenarios shared by the fault tests and the storage tests: a one-block lesson, a real
image worker caught inside its provider call, and a worker killed between its result receipt and its
commit, which must end with the task recovered from that receipt and the provider asked once."""

from __future__ import annotations

from pipeline import versions
from pipeline.core.records import idempotency_key
from receipts.calls import ReceiptBook
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, draft, wait_until
from testkit.system import System, drain, kill


def save_one_block(system: System):
    with system.db() as conn:
        saved = versions.save(conn, draft(1), system.cfg, by=EDITOR)
        rows = conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (saved.content_id,)).fetchall()
    return saved, rows  # image, tts, bundle


def one_block_through_real_workers(system: System):
    """A one-block lesson saved and drained by a real worker on each queue; every task must succeed. Its task rows
    as saved (image, tts, bundle) and as drained."""
    saved, tasks = save_one_block(system)
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    rows = drain(system, saved.content_id)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    return tasks, rows


def worker_in_the_middle_of_an_image_call(system: System, fake):
    """A real image worker whose provider call the fake holds open until `fake.release()`."""
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    worker = system.start_worker("image")
    system.dispatch()
    wait_until(lambda: fake.in_flight("image") == 1, message="the provider call in flight")
    return worker


def key_of(row) -> str:
    return idempotency_key(row["fingerprint"], row["id"])


def killed_after_the_result_receipt_is_recovered_from_it(system: System, fake, book: ReceiptBook) -> None:
    """Kill an image worker after its result receipt is in `book` but before its commit; the workers that
    come after must finish the task from the receipt, without asking the provider again."""
    saved, (image, tts, bundle) = save_one_block(system)
    worker = worker_in_the_middle_of_an_image_call(system, fake)
    with system.holding("SELECT * FROM tasks WHERE id = %s FOR UPDATE", image["id"]):  # holds the commit
        fake.release()
        wait_until(lambda: book.result(image["id"], 1), message="the result receipt")
        system.waiting_on_lock()
        kill(worker)
    receipt = book.result(image["id"], 1)
    assert system.task(image["id"])["status"] == "running"
    system.start_worker("image"), system.start_worker("tts"), system.start_worker("bundle")
    drain(system, saved.content_id)
    row = system.task(image["id"])
    assert (row["status"], row["asset_sha256"], row["attempts"]) == ("succeeded", receipt.sha256, 1)
    with system.db() as conn:
        actions = [e["action"] for e in conn.execute("SELECT action FROM events WHERE task_id = %s ORDER BY id",
                                                     (image["id"],))]
    assert actions[-1] == "recovered_from_receipt"
    assert fake.calls_for(key_of(image)).requests == 1
