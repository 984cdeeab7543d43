import threading
from datetime import datetime, timezone

import pytest
import redis

from pipeline import db, dispatch, tasks, versions
from pipeline.core.errors import Ambiguous, Busy, LeaseLost, Permanent, Transient
from pipeline.db import connect
from testkit.helpers import EDITOR, claim, draft, task_rows, wait_until, work_burst

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def send_all(conn, cfg):
    return dispatch.send_due(conn, redis.Redis.from_url(cfg.redis_url))


def statuses(conn, content_id):
    return [r["status"] for r in conn.execute("SELECT status FROM tasks WHERE content_id = %s ORDER BY id",
                                              (content_id,))]


def test_a_saved_lesson_runs_to_completion_on_an_rq_worker(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(2), cfg, by=EDITOR)
    assert send_all(conn, cfg) == 4
    work_burst(rt)
    # the bundle was sent by the worker that completed the last media task (fast path), then ran
    assert statuses(conn, saved.content_id) == ["succeeded"] * 5
    attempts = conn.execute("SELECT attempts, (SELECT count(*) FROM outbox o WHERE o.task_id = t.id "
                            "AND o.sent_at IS NOT NULL) AS dispatches FROM tasks t").fetchall()
    assert {(r["attempts"], r["dispatches"]) for r in attempts} == {(1, 1)}
    assert len(executor.calls) == 5


def test_two_workers_given_the_same_task_claim_it_once(conn, cfg):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    task_id = task_rows(cfg.database_url, saved.content_id)[0]["id"]
    start = threading.Barrier(2)

    def claim_as(name):
        start.wait()
        return claim(cfg, task_id, worker=name)
    results = []
    threads = [threading.Thread(target=lambda n=n: results.append(claim_as(n))) for n in ("w1", "w2")]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert sorted(r is None for r in results) == [False, True]
    row = db.one(conn, "tasks_get", {"task_id": task_id})
    assert (row["status"], row["attempts"]) == ("running", 1)


def test_a_worker_whose_lease_was_taken_over_cannot_write(conn, cfg):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    task_id = task_rows(cfg.database_url, saved.content_id)[0]["id"]
    stale_attempt = claim(cfg, task_id, worker="w1", lease_seconds=0.5, heartbeat_seconds=0.1)
    stale = stale_attempt.task
    # given the lease expires and the task is handed to a new holder (as the reconciler does)
    wait_until(lambda: conn.execute("SELECT lease_until < now() AS gone FROM tasks WHERE id = %s",
                                    (task_id,)).fetchone()["gone"])
    conn.execute("UPDATE tasks SET status = 'retry', lease_token = NULL, lease_until = NULL WHERE id = %s", (task_id,))
    fresh = claim(cfg, task_id, worker="w2").task
    assert fresh is not None and fresh.lease_token != stale.lease_token
    asset = tasks.Asset("a" * 64, "image/png", 1)
    # then every exit of the stale holder is refused and leaves the task alone
    with pytest.raises(LeaseLost):
        tasks.succeed(conn, stale, asset, actor="w1")
    for error in (Transient("x"), Permanent("x"), Ambiguous("x")):
        with pytest.raises(LeaseLost):
            tasks.fail_attempt(conn, stale, error, cfg, actor="w1", now=datetime.now(timezone.utc))
    assert stale_attempt.beat() and stale_attempt.lost
    row = db.one(conn, "tasks_get", {"task_id": task_id})
    assert (row["status"], str(row["lease_token"])) == ("running", str(fresh.lease_token))
    assert row["asset_sha256"] is None
    # but the stale holder's paid result is kept as an asset of its input, for reuse
    assert tasks.find_reusable(conn, stale.fingerprint) == asset
    # while the new holder can complete
    assert tasks.succeed(conn, fresh, asset, actor="w2").status.value == "succeeded"


def test_a_duplicate_message_before_the_retry_time_neither_runs_nor_spends_an_attempt(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image = task_rows(cfg.database_url, saved.content_id)[0]
    executor.script[image["id"]] = [Transient("connection refused")]
    send_all(conn, cfg)
    work_burst(rt, ("image",))
    row = db.one(conn, "tasks_get", {"task_id": image["id"]})
    assert (row["status"], row["attempts"]) == ("retry", 1)
    # when a duplicate message arrives while the retry waits (pushed straight to RQ)
    conn.execute("UPDATE tasks SET available_at = now() + interval '1 hour' WHERE id = %s", (image["id"],))
    dispatch.enqueue(rt.redis, [{"id": 0, "task_id": image["id"], "queue": "image"}])
    work_burst(rt, ("image",))
    row = db.one(conn, "tasks_get", {"task_id": image["id"]})
    assert (row["status"], row["attempts"]) == ("retry", 1)
    assert executor.calls.count(image["id"]) == 1


def test_transient_errors_retry_with_growing_capped_delays_then_dead_letter(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image = task_rows(cfg.database_url, saved.content_id)[0]
    executor.script[image["id"]] = [Transient("refused")] * 3
    delays = []
    for attempt in (1, 2, 3):
        wait_until(lambda: send_all(conn, cfg) or db.one(conn, "tasks_get", {"task_id": image["id"]})[
            "status"] == "failed", timeout=10, message=f"attempt {attempt} dispatched")
        work_burst(rt, ("image",))
        row = db.one(conn, "tasks_get", {"task_id": image["id"]})
        if row["status"] == "retry":
            delays.append((row["available_at"] - row["updated_at"]).total_seconds())
    assert (row["status"], row["attempts"]) == ("failed", 3)
    assert len(delays) == 2 and all(0 <= d <= cfg.backoff_cap_seconds + 0.1 for d in delays)
    dead = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s", (image["id"],)).fetchone()
    assert dead["reason"] == "attempts exhausted" and "refused" in dead["last_error"] and dead["attempts"] == 3


@pytest.mark.parametrize("error, status, attempts, dead", [
    (Permanent("bad prompt", http_status=400), "failed", 1, "permanent error"),
    (Ambiguous("read timeout after send"), "unknown", 1, None),
    (Busy("429", retry_after=0.3), "retry", 0, None),
])
def test_each_error_class_leads_to_its_state(conn, cfg, rt, executor, error, status, attempts, dead):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image = task_rows(cfg.database_url, saved.content_id)[0]
    executor.script[image["id"]] = [error]
    send_all(conn, cfg)
    work_burst(rt, ("image",))
    row = db.one(conn, "tasks_get", {"task_id": image["id"]})
    assert (row["status"], row["attempts"]) == (status, attempts)
    letter = conn.execute("SELECT reason FROM dead_letters WHERE task_id = %s", (image["id"],)).fetchone()
    assert (letter and letter["reason"]) == dead
    pending = conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NULL",
                           (image["id"],)).fetchone()["n"]
    assert pending == (1 if status == "retry" else 0)   # unknown and failed are never re-queued by themselves


def test_a_task_past_its_deadline_fails_at_claim_without_running(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 second' WHERE content_id = %s",
                 (saved.content_id,))
    send_all(conn, cfg)
    work_burst(rt, ("image",))
    image = task_rows(cfg.database_url, saved.content_id)[0]
    assert (image["status"], image["attempts"]) == ("failed", 0)
    assert executor.calls == []
    assert conn.execute("SELECT reason FROM dead_letters").fetchone()["reason"] == "deadline passed"


def test_a_new_version_refuses_the_completion_of_an_old_running_task(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image = task_rows(cfg.database_url, saved.content_id)[0]
    release, started = threading.Event(), threading.Event()
    executor.script[image["id"]] = [lambda task, ctx: (started.set(), release.wait(20))]
    send_all(conn, cfg)

    def save_new_version_meanwhile():
        wait_until(started.is_set, message="work started")
        with connect(cfg.database_url, autocommit=True) as other:
            versions.save(other, draft(1, prefix="v2"), cfg, by=EDITOR, content_id=saved.content_id,
                          base_version=1)
        release.set()
    editor = threading.Thread(target=save_new_version_meanwhile)
    editor.start()
    work_burst(rt, ("image",))
    editor.join(30)
    row = db.one(conn, "tasks_get", {"task_id": image["id"]})
    assert row["status"] == "superseded" and row["asset_sha256"] is None
    events = [e["reason"] for e in db.all(conn, "events_of_task", {"task_id": image["id"]})]
    assert events == ["claimed", "superseded by version 2"]


def test_the_bundle_runs_only_after_every_media_task_succeeded(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(2), cfg, by=EDITOR)
    rows = task_rows(cfg.database_url, saved.content_id)
    bundle = rows[-1]
    executor.script[rows[0]["id"]] = [Transient("once")]
    send_all(conn, cfg)
    work_burst(rt)
    assert db.one(conn, "tasks_get", {"task_id": bundle["id"]})["status"] == "ready"
    assert conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s", (bundle["id"],)).fetchone()["n"] == 0
    # a message for the bundle now claims nothing
    dispatch.enqueue(rt.redis, [{"id": 0, "task_id": bundle["id"], "queue": "bundle"}])
    work_burst(rt, ("bundle",))
    assert db.one(conn, "tasks_get", {"task_id": bundle["id"]})["attempts"] == 0
    # once the retried image succeeds, the bundle is queued and runs
    wait_until(lambda: send_all(conn, cfg), timeout=10, message="retry dispatched")
    work_burst(rt)
    assert statuses(conn, saved.content_id) == ["succeeded"] * 5
    assert executor.calls[-1] == bundle["id"]


def test_cancelling_a_version_cancels_waiting_tasks_now_and_the_running_one_at_its_check(conn, cfg, rt, executor):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    image, tts, bundle = task_rows(cfg.database_url, saved.content_id)
    release, started = threading.Event(), threading.Event()
    executor.script[image["id"]] = [lambda task, ctx: (started.set(), release.wait(20))]
    send_all(conn, cfg)
    redis.Redis.from_url(cfg.redis_url).delete("rq:queue:tts")  # keep the tts task waiting
    cancelled_now = []

    def cancel_meanwhile():
        wait_until(started.is_set, message="image work started")
        with connect(cfg.database_url, autocommit=True) as other:
            cancelled_now.append(versions.cancel(other, saved.content_id, 1, by=EDITOR))
            cancelled_now.append(db.one(other, "tasks_get", {"task_id": image["id"]})["status"])
        release.set()
    editor = threading.Thread(target=cancel_meanwhile)
    editor.start()
    work_burst(rt, ("image",))
    editor.join(30)
    assert cancelled_now == [2, "running"]  # tts and bundle at once; the running image waits for its worker
    assert statuses(conn, saved.content_id) == ["cancelled"] * 3
    assert conn.execute("SELECT count(*) AS n FROM tasks WHERE asset_sha256 IS NOT NULL").fetchone()["n"] == 0


def test_a_newer_versions_task_cannot_call_for_an_input_an_older_one_has_in_flight(conn, cfg):
    # given: version 1's first image is being paid for
    saved = versions.save(conn, draft(2), cfg, by=EDITOR)
    old_id = task_rows(cfg.database_url, saved.content_id)[0]["id"]
    old = claim(cfg, old_id, worker="w1").task
    assert tasks.take_input(conn, old, 30)
    # when: the same text is saved again (the old task is superseded mid-call) and its twin runs
    versions.save(conn, draft(2), cfg, by=EDITOR, content_id=saved.content_id, base_version=1)
    twin_row = next(r for r in task_rows(cfg.database_url, saved.content_id)
                    if r["version"] == 2 and r["fingerprint"] == old.fingerprint)
    twin = claim(cfg, twin_row["id"], worker="w2").task
    # then: the twin may not call, and waits without spending an attempt
    assert not tasks.take_input(conn, twin, 30)
    parked = tasks.wait_for_input(conn, twin, cfg, actor="w2", now=datetime.now(timezone.utc))
    row = db.one(conn, "tasks_get", {"task_id": twin.id})
    assert (parked.to.value, row["waiting_for"], row["attempts"]) == ("retry", "input", 0)
    # and when the old call answers, its asset is kept and the twin is woken to reuse it
    with pytest.raises(LeaseLost):
        tasks.succeed(conn, old, tasks.Asset("b" * 64, "image/png", 1), actor="w1")
    assert tasks.find_reusable(conn, old.fingerprint).sha256 == "b" * 64
    woken = db.one(conn, "tasks_get", {"task_id": twin.id})
    assert woken["available_at"] <= datetime.now(timezone.utc)


def test_the_heartbeat_lets_an_attempt_go_past_its_ceiling(conn, cfg):
    saved = versions.save(conn, draft(1), cfg, by=EDITOR)
    task_id = task_rows(cfg.database_url, saved.content_id)[0]["id"]
    held = claim(cfg, task_id, attempt_ceiling_seconds=1)
    assert held.beat() and not held.lost
    wait_until(lambda: conn.execute("SELECT attempt_ends_at < now() AS over FROM tasks WHERE id = %s",
                                    (task_id,)).fetchone()["over"], message="the attempt's ceiling passing")
    # the lease is no longer renewed: it runs out and the reconciler moves the task on
    assert held.beat() and held.lost
