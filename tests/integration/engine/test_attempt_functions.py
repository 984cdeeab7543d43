"""The claim and a worker's success run in PostgreSQL (`attempt_claim`, `attempt_succeed`); the pure core
(`pipeline.core.lease`) is their specification. Each case is set up in the database, decided by the core from the
facts read back, and run through the function: both must give the decision the case names."""

from datetime import datetime, timezone

import pytest

from pipeline import db, tasks, versions
from pipeline.core.lease import Claimable, Exit, claim_refusal, success_exit
from pipeline.core.records import Asset
from pipeline.core.states import TaskStatus
from testkit.helpers import EDITOR, claim, draft

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

# case -> (SQL that puts the saved version's image task in that state, whether it may be claimed)
CLAIM_CASES = {
    "ready and due": ([], True),
    "waiting for a retry, due": (["UPDATE tasks SET status = 'retry' WHERE id = %(task)s"], True),
    "running": (["UPDATE tasks SET status = 'running', lease_token = gen_random_uuid(), "
                 "lease_until = now() + interval '1 minute' WHERE id = %(task)s"], False),
    "succeeded": ([f"UPDATE tasks SET status = 'succeeded', asset_sha256 = '{'a' * 64}' WHERE id = %(task)s"], False),
    **{status: ([f"UPDATE tasks SET status = '{status}' WHERE id = %(task)s"], False)
       for status in ("unknown", "failed", "superseded", "cancelled")},
    "not due yet": (["UPDATE tasks SET available_at = now() + interval '1 hour' WHERE id = %(task)s"], False),
    "no attempt left": (["UPDATE tasks SET attempts = max_attempts WHERE id = %(task)s"], False),
    "deadline passed": (["UPDATE tasks SET deadline_at = now() - interval '1 second' WHERE id = %(task)s"], False),
    "version superseded": (["UPDATE contents SET current_version = 2 WHERE id = %(content)s"], False),
    "version cancelled": (["UPDATE versions SET cancel_requested_at = now() WHERE content_id = %(content)s"], False),
    "bulk lane paused": (["UPDATE versions SET lane = 'bulk' WHERE content_id = %(content)s",
                          "INSERT INTO lane_pauses (lane, paused_by) VALUES ('bulk', 'test')"], False),
    "bulk lane running": (["UPDATE versions SET lane = 'bulk' WHERE content_id = %(content)s"], True),
    "a dependency not succeeded": ([], False),   # the bundle task, whose media tasks have not run
}

FACTS = """
SELECT t.status::text AS status, t.available_at, t.attempts, t.max_attempts, t.deadline_at,
       c.current_version = t.version AS current_version, v.cancel_requested_at IS NOT NULL AS cancel_requested,
       lane_paused(v.lane) AS lane_paused,
       (SELECT count(*) FROM task_unmet_deps u WHERE u.task_id = t.id) AS unmet_dependencies, now() AS now
FROM tasks t JOIN contents c ON c.id = t.content_id
JOIN versions v ON v.content_id = t.content_id AND v.version = t.version WHERE t.id = %(task)s"""


def facts(conn, task_id: int) -> tuple[Claimable, datetime]:
    row = conn.execute(FACTS, {"task": task_id}).fetchone()
    now = row.pop("now")
    return Claimable(**dict(row, status=TaskStatus(row["status"]))), now


def saved_task(conn, cfg, kind: str) -> dict:
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    return conn.execute("SELECT id, content_id FROM tasks WHERE content_id = %s AND kind = %s",
                        (saved.content_id, kind)).fetchone()


@pytest.mark.parametrize("case", CLAIM_CASES)
def test_the_claim_function_takes_a_task_exactly_when_the_core_says_it_may(conn, cfg, case):
    # given a task in the case's state
    setup, claimable = CLAIM_CASES[case]
    row = saved_task(conn, cfg, "bundle" if case == "a dependency not succeeded" else "image")
    for statement in setup:
        conn.execute(statement, {"task": row["id"], "content": row["content_id"]})
    task_facts, now = facts(conn, row["id"])
    # when the core decides and the worker claims
    refusal = claim_refusal(task_facts, now)
    attempt = claim(cfg, row["id"])
    # then both take it exactly when the case says it may be taken
    assert (refusal is None, attempt is not None) == (claimable, claimable), refusal
    after = db.one(conn, "tasks_get", {"task_id": row["id"]})
    if claimable:
        assert (after["status"], after["attempts"], after["lease_token"]) == (
            "running", task_facts.attempts + 1, attempt.task.lease_token)
        assert attempt.holds_input and attempt.call is not None and attempt.call.slot is not None
    else:
        assert (after["status"], after["attempts"]) == (task_facts.status.value, task_facts.attempts)


# case -> (SQL run while the call is in flight, where the success leaves the task)
SUCCESS_CASES = {
    "still held": ([], Exit.SUCCEEDED),
    "version cancelled meanwhile": (
        ["UPDATE versions SET cancel_requested_at = now() WHERE content_id = %(content)s"], Exit.CANCELLED),
    "superseded meanwhile": (
        ["UPDATE tasks SET status = 'superseded', lease_token = NULL, lease_until = NULL WHERE id = %(task)s"],
        Exit.LOST),
    "lease handed to another worker": (
        ["UPDATE tasks SET lease_token = gen_random_uuid() WHERE id = %(task)s"], Exit.LOST),
    "lease expired and decided by the reconciler": (
        ["UPDATE tasks SET status = 'unknown', lease_token = NULL, lease_until = NULL WHERE id = %(task)s"],
        Exit.LOST),
}


@pytest.mark.parametrize("case", SUCCESS_CASES)
def test_the_success_function_moves_the_task_as_the_core_says_and_keeps_the_paid_result(conn, cfg, case):
    # given a claimed image task whose call ran, and the case's change while it ran
    setup, expected = SUCCESS_CASES[case]
    row = saved_task(conn, cfg, "image")
    attempt = claim(cfg, row["id"])
    for statement in setup:
        conn.execute(statement, {"task": row["id"], "content": row["content_id"]})
    now = db.one(conn, "tasks_get", {"task_id": row["id"]})
    cancel = conn.execute("SELECT cancel_requested_at IS NOT NULL AS c FROM versions WHERE content_id = %s",
                          (row["content_id"],)).fetchone()["c"]
    decided = success_exit(TaskStatus(now["status"]), now["lease_token"] == attempt.task.lease_token, cancel)
    # when the worker writes its success
    asset = Asset(f"{row['id']:064x}", "image/png", 10)
    ledger = {"provider": "local-image", "model": "m", "idempotency_key": "k", "outcome": "succeeded",
              "http_status": 200, "latency_ms": 1, "cost": 0.0}
    with conn.transaction():
        done = tasks.succeed_in(conn, attempt.task, asset, actor="w", call=attempt.call, ledger=ledger)
    # then the function and the core agree with the case
    exit_ = Exit.LOST if done.status is None else Exit(done.status.value)
    assert (decided, exit_) == (expected, expected)
    after = db.one(conn, "tasks_get", {"task_id": row["id"]})
    assert after["status"] == {Exit.SUCCEEDED: "succeeded", Exit.CANCELLED: "cancelled"}.get(exit_, now["status"])
    # and whatever the exit, the paid result is kept: the asset for its input, the ledger row, the slot freed
    assert tasks.find_reusable(conn, attempt.task.fingerprint) == asset
    assert conn.execute("SELECT count(*) AS n FROM provider_calls WHERE task_id = %s AND attempt = %s",
                        (row["id"], attempt.task.attempts)).fetchone()["n"] == 1
    assert conn.execute("SELECT count(*) AS n FROM provider_slots WHERE holder = %s",
                        (attempt.task.lease_token,)).fetchone()["n"] == 0
    assert conn.execute("SELECT count(*) AS n FROM input_calls WHERE lease_token = %s",
                        (attempt.task.lease_token,)).fetchone()["n"] == 0


def test_a_success_unblocks_the_bundle_once_both_media_succeeded(conn, cfg):
    # given a one-block lesson whose image and narration are claimed
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    ids = {r["kind"]: r["id"] for r in conn.execute("SELECT id, kind::text AS kind FROM tasks WHERE content_id = %s",
                                                    (saved.content_id,))}
    image, speech = claim(cfg, ids["image"]), claim(cfg, ids["tts"])
    # when the image succeeds, nothing is unblocked; when the narration does, the bundle's message is written
    first = tasks.succeed(conn, image.task, Asset("1" * 64, "image/png", 1), actor="w", call=image.call)
    second = tasks.succeed(conn, speech.task, Asset("2" * 64, "audio/wav", 1), actor="w", call=speech.call)
    assert first.unblocked == []
    assert [r["task_id"] for r in conn.execute("SELECT task_id FROM outbox WHERE id = ANY(%s)",
                                               (second.unblocked,))] == [ids["bundle"]]
    assert datetime.now(timezone.utc) >= db.one(conn, "tasks_get", {"task_id": ids["bundle"]})["available_at"]
