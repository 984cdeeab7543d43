"""The fault matrix: one fault injected for real into a running system, driven through its HTTP API,
judged by task states, events, receipts, the delivered manifest and the fake provider's counters.
Rows about worker deaths, Redis FLUSHALL and concurrent reconcile runs live beside this file; the rows that kill
nothing and change no setting share one stack (test_matrix_one_stack.py); the rows `bin/drill` runs too are
defined once in testkit/drill_cases.py (test_drills.py)."""

import signal

import psycopg
import pytest

from pipeline import versions
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, draft, lesson, wait_until
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
        saved = versions.save(conn, draft(1), stack.system.cfg, by=EDITOR)
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
