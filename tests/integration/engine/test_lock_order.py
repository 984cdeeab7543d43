"""Statements that lock several tasks lock them in id order, as a completion does (its own task with its
dependents and its input's waiters, in one statement, `tasks_lock_settling`): two transactions that lock in one
order wait for each other, never deadlock. Found twice as a deadlock between a save superseding version 1 and a
worker settling one of its tasks: first by the save, then by the completion, which locked its dependents before its
own task."""

import threading
from datetime import datetime, timezone

import pytest

from pipeline import db, tasks, versions
from pipeline.core.errors import Transient
from pipeline.core.records import Asset
from pipeline.db import connect
from testkit.helpers import EDITOR, claim, draft, wait_until

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

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
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
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


def _succeed(conn, attempt, cfg) -> None:
    tasks.succeed(conn, attempt.task, Asset(f"{attempt.task.id:064x}", "image/png", 1), actor="w", call=attempt.call)


def _fail(conn, attempt, cfg) -> None:
    tasks.fail_attempt(conn, attempt.task, Transient("connection refused"), cfg, actor="w",
                       now=datetime.now(timezone.utc))


def _dependent(conn, ids: dict) -> tuple[int, int]:
    """The narration settles; the bundle waits on it."""
    return ids["tts"][0], ids["bundle"][0]


def _input_waiter(conn, ids: dict) -> tuple[int, int]:
    """The first image settles; the second has the same input and waits for its call."""
    own, waiter = ids["image"]
    conn.execute("UPDATE tasks SET fingerprint = (SELECT fingerprint FROM tasks WHERE id = %s), status = 'retry', "
                 "waiting_for = 'input' WHERE id = %s", (own, waiter))
    return own, waiter


# completion -> (what it writes, which other task of the version it must lock after its own)
COMPLETIONS = {
    "a success releasing its dependent": (_succeed, _dependent),
    "a success releasing its input's waiter": (_succeed, _input_waiter),
    "a failure releasing its input's waiter": (_fail, _input_waiter),
}


@pytest.mark.parametrize("completion", sorted(COMPLETIONS))
def test_a_completion_locks_its_own_task_first_so_it_cannot_deadlock_with_a_save(completion, conn, cfg):
    # given a two-block lesson's task held by a worker, and another task of the version its completion will lock
    write, pick = COMPLETIONS[completion]
    saved = versions.save(conn, draft(2), cfg, by=EDITOR)
    ids: dict[str, list[int]] = {}
    for r in conn.execute("SELECT id, kind::text AS kind FROM tasks WHERE content_id = %s ORDER BY id",
                          (saved.content_id,)):
        ids.setdefault(r["kind"], []).append(r["id"])
    own, other = pick(conn, ids)
    assert other > own
    attempt = claim(cfg, own)

    with connect(cfg.database_url) as holder, connect(cfg.database_url) as worker, \
            connect(cfg.database_url) as saver:
        for each in (worker, saver):
            each.execute("SET lock_timeout = '20s'")
            each.commit()
        holder.execute("SELECT id FROM tasks WHERE id = %s FOR NO KEY UPDATE", (other,))   # someone reads it
        failures: list[BaseException] = []

        def run(target) -> None:
            try:
                target()
            except BaseException as exc:   # noqa: BLE001 - reported by the main thread
                failures.append(exc)

        def supersede() -> None:
            tasks.supersede_older(saver, saved.content_id, 2, actor="save", by="save", reason="superseded")
            saver.commit()

        waiting = ("SELECT count(DISTINCT pid) AS n FROM pg_locks WHERE NOT granted AND pid IN "
                   "(SELECT pid FROM pg_stat_activity WHERE datname = current_database())")
        # when the completion starts (and waits at the other task) and then a save supersedes the version
        threads = [threading.Thread(target=run, args=(lambda: write(worker, attempt, cfg),)),
                   threading.Thread(target=run, args=(supersede,))]
        threads[0].start()
        wait_until(lambda: conn.execute(waiting).fetchone()["n"] == 1, timeout=10, message="the completion waiting")
        threads[1].start()
        wait_until(lambda: conn.execute(waiting).fetchone()["n"] == 2, timeout=10, message="the save waiting")
        holder.commit()   # the other task is free: the two go on, one after the other
        for thread in threads:
            thread.join(30)
    # then neither was chosen as a deadlock's victim, and the version ends superseded
    assert failures == []
    statuses = {r["id"]: r["status"] for r in conn.execute(
        "SELECT id, status::text AS status FROM tasks WHERE content_id = %s", (saved.content_id,))}
    assert statuses[other] == "superseded"
