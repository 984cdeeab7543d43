"""What a task costs PostgreSQL, counted by PostgreSQL itself: a media task is at most three write
transactions (claim with its slot, rate and input; nothing during the call; one completion), and its
receipts are still written before and after the call."""

import pytest

from pipeline import dispatch, runtime, versions
from pipeline.db import connect
from pipeline.storage import receipt_book
from testkit.helpers import EDITOR, draft, make_settings, work_burst

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

BLOCKS = 4


def next_xid(conn) -> int:
    """PostgreSQL's next transaction id: every transaction that writes anything takes one (reading takes none)."""
    return int(conn.execute("SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS x").fetchone()["x"])


def test_a_media_task_costs_at_most_three_write_transactions_and_keeps_its_receipts(database_url, redis_url,
                                                                                    tmp_path):
    # given a saved lesson, its runnable tasks sent, the real executor with the local providers, and a lease
    # long enough that no heartbeat falls due while a task runs
    cfg = make_settings(database_url, redis_url, tmp_path / "media", LEASE_SECONDS="60", HEARTBEAT_SECONDS="15")
    rt = runtime.with_providers(cfg, worker_id="w")
    with connect(database_url, autocommit=True) as conn:
        saved = versions.save(conn, draft(BLOCKS), cfg, by=EDITOR)
        dispatch.send_now(conn, rt.redis, saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
        before = next_xid(conn)
        # when a worker does every task: 2 per block, then the bundle (sent by the fast path)
        try:
            work_burst(rt)
        finally:
            runtime.install(None)
        writes = next_xid(conn) - before
        tasks = conn.execute("SELECT id, kind::text, status::text, attempts FROM tasks ORDER BY id").fetchall()
        ledger = conn.execute("SELECT task_id FROM provider_calls WHERE outcome = 'succeeded'").fetchall()
        held = conn.execute("SELECT count(*) AS n FROM provider_slots WHERE holder IS NOT NULL").fetchone()["n"]
    media = [t for t in tasks if t["kind"] != "bundle"]
    assert {t["status"] for t in tasks} == {"succeeded"} and len(media) == 2 * BLOCKS
    # then everything the worker wrote, the bundle and its dispatch included, is at most 3 per media task
    assert writes <= 3 * len(media), f"{writes} write transactions for {len(media)} media tasks"
    # and each media call has its ledger row and both receipts, and no provider slot is left held
    assert sorted(r["task_id"] for r in ledger) == [t["id"] for t in media]
    book = receipt_book(cfg)
    assert all(book.intent(t["id"], 1) and book.result(t["id"], 1) for t in media)
    assert held == 0
