"""Statements that lock several tasks lock them in id order, as a completion does (its own task, then its
dependents, which always have higher ids): two transactions that lock in one order wait for each other, never
deadlock. Found as a deadlock between a save superseding version 1 and a worker settling one of its tasks."""

import threading

import pytest

from pipeline import db, tasks, versions
from pipeline.db import connect
from testkit.helpers import draft, wait_until

# each statement that locks a version's tasks at once, with what it needs to run
STATEMENTS = {
    "supersede": lambda conn, content_id: tasks.supersede_older(conn, content_id, 2, actor="save", by="save",
                                                                 reason="superseded"),
    "cancel": lambda conn, content_id: db.all(conn, "tasks_cancel_waiting", {"content_id": content_id, "version": 1,
                                                                            "actor": "editor"}),
    "lock_version": lambda conn, content_id: db.all(conn, "tasks_of_version_locked",
                                                   {"content_id": content_id, "version": 1}),
}


@pytest.mark.parametrize("statement", sorted(STATEMENTS))
def test_a_statement_over_a_versions_tasks_locks_them_in_id_order(statement, conn, cfg):
    saved = versions.save(conn, draft(1), cfg, actor="editor")
    ids = {r["kind"]: r["id"] for r in conn.execute("SELECT id, kind::text AS kind FROM tasks WHERE content_id = %s",
                                                    (saved.content_id,)).fetchall()}
    media, bundle = [ids["image"], ids["tts"]], ids["bundle"]
    assert bundle > max(media)
    # the media rows now lie after the bundle's in the table, so a scan in table order meets the bundle first
    conn.execute("UPDATE tasks SET updated_at = now() WHERE id = ANY(%s)", (media,))

    with connect(cfg.database_url) as worker, connect(cfg.database_url) as other:
        # a worker settling the narration holds its row and will next lock its dependent, the bundle
        worker.execute("SELECT id FROM tasks WHERE id = %s FOR NO KEY UPDATE", (media[1],))
        other.execute("SET enable_indexscan = off; SET enable_bitmapscan = off")   # table order, as in the field
        other.execute("SET lock_timeout = '20s'")
        failure: list[BaseException] = []

        def run() -> None:
            try:
                STATEMENTS[statement](other, saved.content_id)
                other.commit()
            except BaseException as exc:   # noqa: BLE001 - reported by the main thread
                failure.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        wait_until(lambda: conn.execute(
            "SELECT count(*) AS n FROM pg_locks WHERE NOT granted AND locktype = 'transactionid'").fetchone()["n"],
            timeout=10, message="the statement waiting for the worker's row")
        # the worker goes on to the bundle: free, because the statement waits at the narration, below it
        worker.execute("SET lock_timeout = '5s'")
        worker.execute("SELECT id FROM tasks WHERE id = %s FOR NO KEY UPDATE", (bundle,))
        worker.commit()
        thread.join(30)
    assert failure == []
