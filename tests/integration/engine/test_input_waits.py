"""A task whose input another task holds parks behind it without spending an attempt until the holder is done,
however long that takes: a batch line holds its input until its task's deadline (pipeline.tasks.wait_for_input,
pipeline.batches.LineSettlement)."""

import threading
from datetime import datetime, timezone

import pytest

from pipeline import batches, db, storage, tasks, versions
from pipeline.core.content import parse_draft
from pipeline.core.errors import WaitingForInput
from pipeline.db import connect
from testkit.helpers import EDITOR, IMPORTER, SECOND_EDITOR, claim, make_settings, task_rows, wait_until

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

BATCH = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "http://127.0.0.1:9", "IMAGE_API_KEY": "sk-test-image",
         "IMAGE_DAILY_BUDGET": "unlimited", "IMAGE_BULK_BACKEND": "batch"}


@pytest.fixture
def cfg(database_url, redis_url, tmp_path):
    return make_settings(database_url, redis_url, tmp_path / "media", **BATCH)


def bulk_image(conn, cfg, text):
    """The image task of a one-block lesson saved in the bulk lane."""
    body = {"title": "Import", "locale": "en-US", "blocks": [{"key": "b0", "text": text}]}
    saved = versions.save(conn, parse_draft(body), cfg, by=IMPORTER, lane="bulk")
    return next(r for r in task_rows(cfg.database_url, saved.content_id) if r["kind"] == "image")


def in_a_batch_line(conn, cfg, task_id):
    """The task claimed, holding its input, and its call enlisted as a batch line; the line."""
    held = claim(cfg, task_id, worker="w1")
    assert held.holds_input
    assert batches.enlist(conn, cfg, storage.receipt_book(cfg), held.task, held.call.booking)
    return conn.execute("SELECT * FROM batch_lines WHERE task_id = %s", (task_id,)).fetchone()


def test_a_task_whose_input_is_in_a_batch_waits_for_it_spending_no_attempt_instead_of_failing(conn, cfg):
    # given: a lesson's image whose line waits for its batch (the input held until that task's deadline)
    holder = bulk_image(conn, cfg, "A lake at dawn.")
    in_a_batch_line(conn, cfg, holder["id"])
    # when: the next lesson, saved a moment later, repeats the input, and its task is claimed
    twin = claim(cfg, bulk_image(conn, cfg, "A lake at dawn.")["id"], worker="w2")
    assert not twin.holds_input
    parked = tasks.wait_for_input(conn, twin.task, cfg, actor="w2", now=datetime.now(timezone.utc))
    # then: it parks, its attempt given back, until its holder's release wakes it (its deadline at the latest)
    row = db.one(conn, "tasks_get", {"task_id": twin.task.id})
    assert (parked.to.value, row["status"], row["waiting_for"], row["attempts"]) == ("retry", "retry", "input", 0)
    assert row["available_at"] == row["deadline_at"]


def park_while_released(conn, cfg, twin, holder_id: int, release) -> dict:
    """Park `twin` for its input as wait_for_input does, step by step, while `release(other_conn)` runs on another
    connection: the release reaches the hold's lock the park holds and waits for the park's commit. The task's row
    afterwards, with `due`: whether its unsent message is due now."""
    with connect(cfg.database_url, autocommit=True) as other:
        pid = other.info.backend_pid

        def run():
            with other.transaction():
                release(other)
        releasing = threading.Thread(target=run)
        with conn.transaction():
            assert db.one(conn, "input_calls_holder", {"fingerprint": twin.fingerprint})["task_id"] == holder_id
            releasing.start()
            wait_until(lambda: conn.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                                            (pid,)).fetchone()["wait_event_type"] == "Lock",
                       message="the release waiting for the park's lock")
            tasks.fail_attempt_in(conn, twin, WaitingForInput(f"task {holder_id} is making the same input",
                                                              retry_after=3600), cfg, actor="w2",
                                  now=datetime.now(timezone.utc))
        releasing.join(10)
    row = db.one(conn, "tasks_get", {"task_id": twin.id})
    row["due"] = conn.execute("SELECT bool_and(available_at <= now()) AS due FROM outbox WHERE task_id = %s "
                              "AND sent_at IS NULL", (twin.id,)).fetchone()["due"]
    return row


def test_a_task_parking_while_the_line_it_waits_for_is_settled_is_woken_by_the_settlement(conn, cfg):
    # given: a line in its batch, and a task with the same input claimed
    holder = bulk_image(conn, cfg, "A lake at noon.")
    line = in_a_batch_line(conn, cfg, holder["id"])
    twin = claim(cfg, bulk_image(conn, cfg, "A lake at noon.")["id"], worker="w2").task
    # when: the line is settled while the task parks
    row = park_while_released(conn, cfg, twin, holder["id"],
                              lambda other: batches.LineSettlement(line, "cancelled").write(other))
    # then: the task is due now, its message with it, to reuse what the line made or to take the input itself
    assert (row["status"], row["waiting_for"]) == ("retry", "input")
    assert row["available_at"] <= datetime.now(timezone.utc) and row["due"]


def test_a_task_parking_while_a_synchronous_holder_releases_its_input_is_woken_by_the_release(conn, cfg):
    # given: an editor's image claimed (its call holds the input), and a task with the same input claimed
    body = {"title": "Lesson", "locale": "en-US", "blocks": [{"key": "b0", "text": "A lake at dusk."}]}
    first = versions.save(conn, parse_draft(body), cfg, by=EDITOR)
    holder = claim(cfg, next(r for r in task_rows(cfg.database_url, first.content_id) if r["kind"] == "image")["id"],
                   worker="w1")
    assert holder.holds_input
    second = versions.save(conn, parse_draft(body), cfg, by=SECOND_EDITOR)
    twin = claim(cfg, next(r for r in task_rows(cfg.database_url, second.content_id) if r["kind"] == "image")["id"],
                 worker="w2").task
    # when: the holder's call ends while the task parks
    row = park_while_released(conn, cfg, twin, holder.task.id, lambda other: other.execute(
        "SELECT input_calls_release(%s, %s)", (twin.fingerprint, holder.task.lease_token)))
    # then: the release itself woke it, with its message
    assert (row["status"], row["waiting_for"]) == ("retry", "input")
    assert row["available_at"] <= datetime.now(timezone.utc) and row["due"]
