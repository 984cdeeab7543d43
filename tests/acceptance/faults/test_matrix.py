"""The fault matrix: one fault injected for real into a running system, driven through its HTTP API,
judged by task states, events, receipts, the delivered manifest and the fake provider's counters.
Rows about worker deaths, Redis FLUSHALL and concurrent reconcile runs live beside this file; the rows
`bin/drill` runs too are defined once in testkit/drill_cases.py (test_drills.py)."""

import signal

import psycopg
import pytest

from pipeline import versions
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import Behaviour
from testkit.helpers import draft, lesson, wait_until
from testkit.system import kill, settle


def key(row):
    return idempotency_key(row["fingerprint"], row["id"])


def events(stack, task_id):
    with stack.system.db() as conn:
        return conn.execute("SELECT * FROM events WHERE task_id = %s ORDER BY id", (task_id,)).fetchall()


def test_a_worker_started_while_redis_is_away_waits_for_it_instead_of_exiting(stack, fake):
    # given Redis away and the stack's image worker gone (a restart during the outage)
    stack.valkey.stop()
    image = next(w for w in stack.system.workers if "image" in w.args)
    kill(image)
    # when a new image worker starts, then it waits (RQ's own start-up would exit on the connection error)
    log = stack.system.logs / f"worker-image-{len(stack.system.workers)}.log"
    late = stack.system.start_worker("image")
    wait_until(lambda: log.exists() and "waiting for the servers" in log.read_text(), timeout=30,
               message="the new worker saying it waits for Redis")
    assert late.poll() is None
    # and once Redis is back it takes the lesson's image work: every task succeeds, each call made once
    stack.valkey.start()
    saved = stack.save(lesson(1))
    rows = settle(stack, saved["content_id"], timeout=60)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    assert all(fake.calls_for(key(r)).executions == 1 for r in rows[:2])


def test_a_dispatcher_dying_with_claimed_rows_leaves_them_to_be_sent_after_the_claim_lease(stack, fake):
    kill(stack.procs["dispatcher"])
    with stack.system.db() as conn:
        saved = versions.save(conn, draft(1), stack.system.cfg, actor="e")
    stack.valkey.process.send_signal(signal.SIGSTOP)           # enqueue will hang
    try:
        doomed = stack.system._spawn([str(stack.system_root() / "bin" / "dispatch")], "doomed-dispatcher")
        stack.system.workers.append(doomed)
        with stack.system.db() as conn:
            claimed = wait_until(lambda: conn.execute(
                "SELECT id, claim_until FROM outbox WHERE claim_token IS NOT NULL AND sent_at IS NULL").fetchall(),
                message="rows claimed")
        kill(doomed)
    finally:
        stack.valkey.process.send_signal(signal.SIGCONT)
    stack.procs["dispatcher"] = stack.system._spawn([str(stack.system_root() / "bin" / "dispatch")], "dispatcher")
    stack.system.workers.append(stack.procs["dispatcher"])
    rows = settle(stack, saved.content_id)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    with stack.system.db() as conn:
        sent = {r["id"]: r["sent_at"] for r in conn.execute("SELECT id, sent_at FROM outbox")}
    assert all(sent[c["id"]] >= c["claim_until"] for c in claimed)


def test_connection_refused_is_retried_with_backoff_and_succeeds(make_stack, fake):
    # enough attempts that jittered backoff outlasts the refusal window
    stack = make_stack(MAX_ATTEMPTS="10", BACKOFF_BASE_SECONDS="0.5", BACKOFF_CAP_SECONDS="1")
    fake.refuse_connections(seconds=1.0)
    saved = stack.save(lesson(1))
    rows = settle(stack, saved["content_id"], timeout=60)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    retried = [r for r in rows[:2] if r["attempts"] > 1]
    assert retried, "no call met the refusal"
    for row in retried:
        moves = [(e["from_status"], e["to_status"]) for e in events(stack, row["id"]) if e["to_status"]]
        assert ("running", "retry") in moves
        assert fake.calls_for(key(row)).executions == 1


def test_a_429_with_retry_after_waits_without_spending_an_attempt(stack, fake):
    fake.script(Behaviour.fail(429, retry_after=1, endpoint="image"))
    saved = stack.save(lesson(1))
    image = settle(stack, saved["content_id"])[0]
    assert (image["status"], image["attempts"]) == ("succeeded", 1)
    history = events(stack, image["id"])
    busy = [e for e in history if e["to_status"] == "retry"]
    assert len(busy) == 1 and busy[0]["reason"].startswith("busy")
    waited = (history[-1]["at"] - busy[0]["at"]).total_seconds()
    assert waited >= 0.9


def test_a_400_from_the_provider_fails_at_once_with_a_dead_letter(stack, fake):
    fake.script(Behaviour.fail(400, message="prompt violates policy", endpoint="image"))
    saved = stack.save(lesson(1))
    rows = settle(stack, saved["content_id"], done=("succeeded", "failed", "ready"))
    image = stack.system.wait_status(rows[0]["id"], "failed")
    assert image["attempts"] == 1 and "prompt violates policy" in image["last_error"]
    with stack.system.db() as conn:
        letter = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s", (image["id"],)).fetchone()
    assert letter["reason"] == "permanent error" and "prompt violates policy" in letter["last_error"]
    assert fake.calls_for(key(image)).requests == 1


def test_a_new_version_while_the_old_runs_supersedes_it_and_only_the_new_is_delivered(stack, fake):
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    first = stack.save(lesson(1))
    wait_until(lambda: fake.in_flight("image") == 1, message="old image in flight")
    body = {**lesson(1, prefix="新"), "base_version": 1}
    second = stack.api("PUT", f"/api/contents/{first['content_id']}", body)
    assert second.status_code == 202
    fake.release()
    rows = settle(stack, first["content_id"])
    old = [r for r in rows if r["version"] == 1]
    assert {r["status"] for r in old} <= {"superseded", "succeeded"} and old[0]["status"] == "superseded"
    assert stack.api("POST", f"/api/contents/{first['content_id']}/versions/2/approve").status_code == 200
    delivery = stack.api("GET", f"/api/contents/{first['content_id']}/delivery").json()
    new_assets = {r["asset_sha256"] for r in rows if r["version"] == 2}
    delivered = {b[label]["sha256"] for b in delivery["blocks"] for label in ("image", "audio")}
    assert delivery["version"] == 2 and delivered <= new_assets


def test_approving_an_incomplete_version_is_409_and_delivery_stays_as_it_was(stack, fake):
    saved = stack.save(lesson(1))
    settle(stack, saved["content_id"])
    assert stack.api("POST", f"/api/contents/{saved['content_id']}/versions/1/approve").status_code == 200
    before = stack.api("GET", f"/api/contents/{saved['content_id']}/delivery").json()
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    update = stack.api("PUT", f"/api/contents/{saved['content_id']}", {**lesson(1, prefix="改"), "base_version": 1})
    assert update.status_code == 202
    refused = stack.api("POST", f"/api/contents/{saved['content_id']}/versions/2/approve")
    assert refused.status_code == 409
    assert stack.api("GET", f"/api/contents/{saved['content_id']}/delivery").json() == before
    fake.release()


def test_an_editor_retrying_an_unknown_accepts_the_risk_and_the_second_call_is_recorded(stack, fake):
    fake.script(Behaviour("hang", seconds=3, endpoint="image"))
    saved = stack.save(lesson(1))
    image_id = stack.api("GET", f"/api/contents/{saved['content_id']}/versions/1").json()["tasks"][0]["id"]
    image = stack.system.wait_status(image_id, "unknown")
    refused = stack.api("POST", f"/api/tasks/{image_id}/retry", {})
    assert refused.status_code == 409 and "duplicate" in refused.json()["error"]["message"]
    accepted = stack.api("POST", f"/api/tasks/{image_id}/retry", {"accept_duplicate_risk": True})
    assert accepted.status_code == 202
    rows = settle(stack, saved["content_id"])
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    assert fake.calls_for(key(image)).executions == 2
    consent = [e for e in events(stack, image_id) if e["action"] == "duplicate_risk_accepted"]
    assert len(consent) == 1 and consent[0]["actor"] == "editor-0"
    # the spend report lists the second charge with who consented to it
    spend = stack.api("GET", f"/api/contents/{saved['content_id']}/spend").json()
    assert [(d["task_id"], d["outcome"], d["consented_by"]) for d in spend["duplicates"]] == \
        [(image_id, "succeeded", "editor-0")]
    assert spend["totals"]["paid_calls"] == 3   # the ambiguous image call, its consented repeat, the narration


@pytest.mark.server_major
def test_a_call_that_outlives_a_postgresql_restart_is_completed_by_its_worker_without_waiting_for_the_lease(
        system, fake, servers):
    if servers.postgres is None:
        pytest.skip("PostgreSQL is external (DATABASE_URL): this test restarts the server")
    # given production's lease (30 s) and no reconciler: only the worker itself can finish the task
    slow = system.with_env(LEASE_SECONDS="30", HEARTBEAT_SECONDS="10", IMAGE_READ_TIMEOUT="20")
    fake.set_default(Behaviour("delay", seconds=3))
    _, task_id = slow.save_lesson(1)
    slow.start_worker("image")
    slow.dispatch()
    wait_until(lambda: fake.in_flight("image") > 0, message="the image call in flight")
    servers.postgres.restart()

    def status():
        try:
            return slow.task(task_id)["status"]
        except psycopg.OperationalError:
            return None
    wait_until(lambda: status() == "succeeded", timeout=40, message="the worker completing after the restart")
    assert fake.calls_for(idempotency_key(slow.task(task_id)["fingerprint"], task_id)).executions == 1


@pytest.mark.server_major
def test_a_postgresql_restart_mid_run_loses_nothing_and_needs_no_process_restart(stack, fake, servers):
    if servers.postgres is None:
        pytest.skip("PostgreSQL is external (DATABASE_URL): this test restarts the server")
    fake.set_default(Behaviour("delay", seconds=0.3))
    saved = stack.save(lesson(4))
    wait_until(lambda: fake.in_flight("image") + fake.in_flight("audio") > 0, message="work in flight")
    servers.postgres.restart()
    rows = settle(stack, saved["content_id"], timeout=90)
    assert [r["status"] for r in rows] == ["succeeded"] * 9
    assert all(fake.calls_for(key(r)).executions <= 1 for r in rows)
    # the same web process and workers go on serving
    assert wait_until(lambda: stack.api("GET", "/readyz").status_code == 200, message="ready again")
    again = stack.save(lesson(1, prefix="after"))
    assert {r["status"] for r in settle(stack, again["content_id"])} == {"succeeded"}
