"""A missing intent receipt means "never called" only in the store the worker wrote to."""

import pytest
import redis

from pipeline import db, dispatch, versions
from pipeline.reconcile import Reconciler
from receipts.calls import ReceiptBook
from testkit.helpers import EDITOR, claim, draft, task_rows, wait_until, work_burst

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def claimed_then_abandoned(conn, cfg, store_id):
    """A worker claims the image task, writes no receipt where we look, and is gone when its lease runs out."""
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image = next(r for r in task_rows(cfg.database_url, saved.content_id) if r["kind"] == "image")
    assert claim(cfg, image["id"], worker="machine-a:1", receipt_store=store_id, lease_seconds=0.2,
                 heartbeat_seconds=0.1)
    wait_until(lambda: conn.execute("SELECT lease_until < now() AS gone FROM tasks WHERE id = %s",
                                    (image["id"],)).fetchone()["gone"])
    return image["id"]


def test_a_store_keeps_one_identity_and_two_stores_have_two(tmp_path):
    here, there = ReceiptBook(tmp_path / "a"), ReceiptBook(tmp_path / "b")
    assert here.store_id() == ReceiptBook(tmp_path / "a").store_id() != there.store_id()


def test_an_abandoned_claim_is_retried_by_a_reconciler_that_reads_the_workers_store(conn, cfg):
    task_id = claimed_then_abandoned(conn, cfg, ReceiptBook(cfg.media_dir).store_id())
    Reconciler(cfg, conn, {}).run()
    row = db.one(conn, "tasks_get", {"task_id": task_id})
    assert (row["status"], row["last_error_code"]) == ("retry", "lease_expired")


def test_an_abandoned_claim_is_unknown_to_a_reconciler_on_another_store(conn, cfg, tmp_path):
    task_id = claimed_then_abandoned(conn, cfg, ReceiptBook(tmp_path / "machine-a").store_id())
    Reconciler(cfg, conn, {}).run()
    row = db.one(conn, "tasks_get", {"task_id": task_id})
    assert (row["status"], row["last_error_code"]) == ("unknown", "lease_expired")
    assert "cannot see" in row["last_error"]


def test_a_claim_that_names_no_store_is_unknown_after_its_lease(conn, cfg):
    task_id = claimed_then_abandoned(conn, cfg, None)
    Reconciler(cfg, conn, {}).run()
    assert db.one(conn, "tasks_get", {"task_id": task_id})["status"] == "unknown"


def test_a_worker_records_the_store_it_writes_its_receipts_to(conn, cfg, rt):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    dispatch.send_due(conn, redis.Redis.from_url(cfg.redis_url))
    work_burst(rt)
    stores = {r["receipt_store"] for r in conn.execute(
        "SELECT receipt_store FROM tasks WHERE content_id = %s", (saved.content_id,))}
    assert stores == {ReceiptBook(cfg.media_dir).store_id()}
