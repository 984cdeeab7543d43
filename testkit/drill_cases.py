"""The fault drills' cases: each injects one fault for real into a whole stack (testkit/drills.py runs them,
for `bin/drill` and for tests/acceptance/faults/test_drills.py) and checks what must hold; the record of what it
saw is read afterwards. The lessons' list, in its order.
"""

from __future__ import annotations

import signal
import time
from typing import Callable

import redis
from rq import Queue

from pipeline import dispatch
from pipeline.core.records import idempotency_key
from testkit.drills import Case, Drill
from testkit.fakeprovider import Behaviour
from testkit.helpers import lesson, wait_until
from testkit.system import ROOT, kill, spawn

CASES: list[Case] = []


def case(name: str, **env: str):
    def register(run: Callable[[Drill], None]) -> Callable[[Drill], None]:
        CASES.append(Case(name, run, env))
        return run
    return register


def _counts(d: Drill) -> dict[str, int]:
    with d.db() as conn:
        return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"]
                for t in ("contents", "versions", "tasks", "outbox")}


@case("no fault (control)")
def no_fault(d: Drill) -> None:
    """The same stack and lesson with nothing injected: what every other case's record is read against (each input
    run once, every task straight from ready to succeeded, and how long a lesson takes when nothing goes wrong)."""
    started = time.monotonic()
    d.save(lesson(2))
    tasks = d.all_succeeded()
    d.observe(f"all {len(tasks)} tasks succeeded in {time.monotonic() - started:.2f} s")
    d.check(all(d.runs(t) == 1 for t in tasks if t["kind"] != "bundle"), "an input ran other than once")
    with d.db() as conn:
        detours = conn.execute("SELECT count(*) AS n FROM events WHERE content_id = %s AND to_status IN "
                               "('retry', 'unknown', 'failed')", (d.content_id,)).fetchone()["n"]
    d.check(detours == 0, f"{detours} transitions to retry, unknown or failed without a fault")


@case("commit fails before the outbox")
def commit_fails_before_the_outbox(d: Drill) -> None:
    with d.db() as conn:
        conn.execute("CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS "
                     "$$ BEGIN RAISE EXCEPTION 'injected failure'; END $$")
        conn.execute("CREATE TRIGGER boom BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION boom()")
    response = d.stack.api("POST", "/api/contents", lesson(2))
    d.check(response.status_code == 500 and "injected" not in response.text,
            f"the failed save answered {response.status_code}")
    d.observe(f"failed save: {response.status_code}, rows left {sum(_counts(d).values())}")
    d.check(set(_counts(d).values()) == {0}, f"the failed save left rows: {_counts(d)}")
    with d.db() as conn:
        conn.execute("DROP TRIGGER boom ON outbox")
    d.save(lesson(2))
    d.all_succeeded()


@case("broker down at save")
def broker_down_at_save(d: Drill) -> None:
    d.stack.valkey.stop()
    d.save(lesson(1))
    with d.db() as conn:
        unsent = conn.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NULL").fetchone()["n"]
    d.check(unsent == 2, f"{unsent} messages wait in the outbox, not the lesson's 2")
    d.observe(f"accepted with Redis down: {unsent} messages unsent")
    d.stack.valkey.start()
    d.fault()
    d.decided(d.task("image")["id"], ("ready",), timeout=90)
    d.all_succeeded(timeout=90)


@case("published but not marked sent")
def published_but_not_marked_sent(d: Drill) -> None:
    kill(d.stack.procs["dispatcher"])
    d.save_quietly()
    rows = d.tasks()
    # a trigger makes "mark sent" wait for a lock the drill holds: the dispatcher stops after its enqueue
    with d.db() as conn:
        conn.execute("CREATE FUNCTION hold_mark() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "PERFORM pg_advisory_xact_lock(4242); RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER hold_mark BEFORE UPDATE OF sent_at ON outbox FOR EACH ROW "
                     "EXECUTE FUNCTION hold_mark()")
    with d.system.holding("SELECT pg_advisory_lock(4242)"):
        doomed = spawn(d.system, [str(ROOT / "bin" / "dispatch")], "doomed-dispatcher")
        d.system.waiting_on_lock()
        wait_until(lambda: all(d.system.task(r["id"])["status"] == "succeeded" for r in rows[:2]),
                   message="the enqueued messages run")
        # the mark is one autocommit statement sent with its commit: the dispatcher's session is ended too, as
        # a lost machine would end it, so that the mark never commits
        sessions = d.system.sessions_of(doomed)
        kill(doomed)
        d.fault()
        with d.db() as conn:
            ended = conn.execute("SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity "
                                 "WHERE pid = ANY(%s) AND wait_event = 'advisory'", (sessions,)).fetchall()
        d.check([r["ended"] for r in ended] == [True], "the dispatcher's mark was not left waiting")
    with d.db() as conn:
        conn.execute("DROP TRIGGER hold_mark ON outbox")
        marked = conn.execute("SELECT count(*) AS n FROM outbox WHERE sent_at IS NOT NULL AND task_id = ANY(%s)",
                              ([r["id"] for r in rows[:2]],)).fetchone()["n"]
    d.check(marked == 0, "a message was marked sent")   # enqueued and run, never marked sent
    d.restart("dispatcher")
    done = d.all_succeeded()
    d.check(all(r["attempts"] == 1 for r in done), "a task spent a second attempt")
    # after the dead claim's lease the rows are sent again: duplicate messages that claim nothing
    wait_until(lambda: d.logs("worker-").count('"job_skipped"') >= 2, message="both duplicates consumed")
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
    d.check(all(d.system.task(r["id"])["attempts"] == 1 for r in done), "a duplicate message spent an attempt")
    d.check(all(d.fake.calls_for(idempotency_key(r["fingerprint"], r["id"])).requests == 1 for r in done[:2]),
            "a duplicate message reached the provider")


@case("worker killed holding the lease", IMAGE_READ_TIMEOUT="30")
def worker_killed_holding_the_lease(d: Drill) -> None:
    d.fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    d.save(lesson(1))
    image = d.task("image")
    wait_until(lambda: d.fake.in_flight("image") == 1, message="the image call in flight")
    kill(d.worker("image"))
    d.fault()
    d.fake.release()
    d.system.start_worker("image")
    # the fake has no lookup: the call may have been made, so it is marked unknown instead of paid again
    row = d.decided(image["id"], ("running",))
    d.check(row["status"] == "unknown", f"the image is {row['status']}, not unknown")
    d.check(d.fake.calls_for(idempotency_key(image["fingerprint"], image["id"])).requests == 1,
            "the provider was called again")


@case("a stale token completing late", IMAGE_READ_TIMEOUT="30")
def stale_token_completing_late(d: Drill) -> None:
    d.fake.script(Behaviour("delay", seconds=6, endpoint="image"))   # a call longer than the lease (3 s)
    d.save(lesson(1))
    image = d.task("image")
    wait_until(lambda: d.fake.in_flight("image") == 1, message="the image call in flight")
    stale = d.worker("image")
    stale.send_signal(signal.SIGSTOP)   # its heartbeats stop with it: the lease runs out
    d.fault()
    row = d.decided(image["id"], ("running",))
    d.check(row["status"] == "unknown", f"the image is {row['status']}, not unknown")
    wait_until(lambda: d.fake.in_flight("image") == 0, timeout=30, message="the provider answering")
    stale.send_signal(signal.SIGCONT)   # the answer was waiting: its completion is fenced out
    wait_until(lambda: "lease_lost_nothing_written" in d.logs("worker-image"), timeout=30,
               message="the stale worker's refusal")
    after = d.system.task(image["id"])
    d.check((after["status"], after["attempts"]) == ("unknown", 1), f"the stale completion moved it: {after['status']}")


@case("cancel", IMAGE_READ_TIMEOUT="30")
def cancel(d: Drill) -> None:
    d.fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    saved = d.save(lesson(1))
    wait_until(lambda: d.fake.in_flight("image") == 1, message="the image call in flight")
    response = d.stack.api("POST", f"/api/contents/{saved['content_id']}/versions/1/cancel")
    d.check(response.status_code in (200, 202), f"the cancel answered {response.status_code}")
    d.fault()
    d.fake.release()
    rows = d.settle()
    bundle = next(r for r in rows if r["kind"] == "bundle")
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
    d.check(bundle["status"] == "cancelled", f"the bundle is {bundle['status']}, not cancelled")
    d.check(all(r["status"] in ("cancelled", "succeeded") for r in rows), "a task ended otherwise than cancelled")
    approve = d.stack.api("POST", f"/api/contents/{saved['content_id']}/versions/1/approve")
    d.check(approve.status_code == 409, f"approving a cancelled version answered {approve.status_code}")
    d.observe(f"approve after the cancel: {approve.status_code}")


@case("attempts exhausted", MAX_ATTEMPTS="2")
def attempts_exhausted(d: Drill) -> None:
    d.fake.script(Behaviour.fail(408, endpoint="image"), Behaviour.fail(408, endpoint="image"))
    d.save(lesson(1))
    image_id = d.task("image")["id"]
    d.fault()
    image = d.system.wait_status(image_id, "failed")
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
    d.check(image["attempts"] == 2, f"it failed after {image['attempts']} attempts, not 2")
    with d.db() as conn:
        letter = conn.execute("SELECT reason FROM dead_letters WHERE task_id = %s", (image_id,)).fetchone()
    d.check(letter is not None and letter["reason"] == "attempts exhausted", "no dead letter for attempts exhausted")
    response = d.stack.api("POST", f"/api/tasks/{image_id}/retry")
    d.check(response.status_code == 202, f"the manual retry answered {response.status_code}")
    d.all_succeeded()
    with d.db() as conn:
        reopened = conn.execute("SELECT actor, to_status::text AS to_status FROM events WHERE task_id = %s "
                                "AND from_status = 'failed'", (image_id,)).fetchall()
    d.check([(r["actor"], r["to_status"]) for r in reopened] == [(d.stack.owner, "ready")],
            f"the retry was not recorded once as its editor's: {reopened}")


@case("result store expired")
def result_store_expired(d: Drill) -> None:
    saved = d.save(lesson(1))
    rows = d.all_succeeded()
    client = redis.Redis.from_url(d.system.env["REDIS_URL"])
    gone = [key for key in client.scan_iter("rq:*") if not key.startswith(b"rq:worker")]
    if gone:
        client.delete(*gone)   # every job, result and registry RQ kept, as their TTLs would drop them
    d.fault()
    d.check(not [k for k in client.scan_iter("rq:job:*")], "RQ still holds jobs")
    d.observe(f"{len(gone)} RQ keys deleted")
    version = d.stack.api("GET", f"/api/contents/{saved['content_id']}/versions/1").json()
    d.check({t["status"] for t in version["tasks"]} == {"succeeded"}, "the status changed with RQ's results gone")
    d.system.reconcile()
    d.check(d.stack.api("POST", f"/api/contents/{saved['content_id']}/versions/1/approve").status_code == 200,
            "the version could not be approved")
    d.check(d.stack.api("GET", f"/api/contents/{saved['content_id']}/delivery").status_code == 200,
            "no delivery")
    d.check([r["asset_sha256"] for r in d.tasks()] == [r["asset_sha256"] for r in rows], "an asset changed")


@case("queue full", MAX_PENDING_TASKS="6")
def queue_full(d: Drill) -> None:
    d.fake.set_default(Behaviour("delay", seconds=0.5))
    first = d.save(lesson(1))                       # 3 tasks
    before = _counts(d)
    refused = d.stack.api("POST", "/api/contents", lesson(2))   # 5 more
    d.check(refused.status_code == 503 and int(refused.headers.get("Retry-After", "0")) >= 1,
            f"the save over the limit answered {refused.status_code}")
    d.observe(f"over the limit: {refused.status_code}, Retry-After {refused.headers.get('Retry-After')}")
    d.check(_counts(d) == before, "the refused save wrote rows")
    d.fault()
    d.content_id = first["content_id"]
    d.all_succeeded()
    d.save(lesson(2))
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
    d.all_succeeded()


def _slot_runs(d: Drill) -> list[dict]:
    with d.db() as conn:
        return conn.execute("SELECT slot, finished_at FROM reconcile_runs WHERE job = 'reconcile' "
                            "AND slot IS NOT NULL ORDER BY id").fetchall()


def _cron_alone(d: Drill) -> None:
    """Only the drill's cron runs take the reconciler's lock: no loop, and the dispatcher scans nothing."""
    kill(d.stack.procs["reconciler"])


@case("the same slot twice", RECONCILE_SLOT_SECONDS="86400", RECOVERY_SCAN_SECONDS="0")
def same_slot_twice(d: Drill) -> None:
    _cron_alone(d)
    wait_until(lambda: 86_400 - time.time() % 86_400 > 60, timeout=70, interval=1, message="a minute clear of midnight")
    cron = d.system.with_env(RECONCILE_SLOT_SECONDS="86400")
    first, second = cron.run("reconcile", "--slot"), cron.run("reconcile", "--slot")
    d.check((first.returncode, second.returncode) == (0, 0), "a cron run failed")
    d.check("already had its run" in second.stdout and "already had its run" not in first.stdout,
            "the second run of the slot did not say it had nothing to do")
    runs = _slot_runs(d)
    d.check(len(runs) == 1 and runs[0]["finished_at"] is not None, f"{len(runs)} runs recorded for one slot")
    d.observe(f"2 cron runs, {len(runs)} run recorded for slot {runs[0]['slot']:%Y-%m-%d %H:%M}; the second said so")


@case("the same signal across minutes", RECONCILE_SLOT_SECONDS="2", RECOVERY_SCAN_SECONDS="0")
def same_signal_across_slots(d: Drill) -> None:
    _cron_alone(d)
    cron = d.system.with_env(RECONCILE_SLOT_SECONDS="2")
    first = cron.run("reconcile", "--slot")
    slot = int(time.time() // 2)
    wait_until(lambda: int(time.time() // 2) > slot, timeout=5, message="the next slot")
    second = cron.run("reconcile", "--slot")
    d.check((first.returncode, second.returncode) == (0, 0), "a cron run failed")
    runs = _slot_runs(d)
    d.check(len(runs) == 2 and runs[0]["slot"] < runs[1]["slot"], f"{len(runs)} runs for two slots")
    slots = ", ".join(f"{r['slot']:%H:%M:%S}" for r in runs)
    d.observe(f"2 cron runs, {len(runs)} runs recorded, one per slot ({slots})")


@case("dispatched but never claimed")
def dispatched_but_never_claimed(d: Drill) -> None:
    kill(d.worker("image"))
    d.save(lesson(1))
    image = d.task("image")
    queue = Queue("image", connection=redis.Redis.from_url(d.system.env["REDIS_URL"]))
    wait_until(lambda: queue.count > 0, message="the image's message in its queue")
    queue.empty()   # lost while queued: Redis restarted empty, say
    d.fault()
    d.system.start_worker("image")
    d.decided(image["id"], ("ready",))
    d.all_succeeded()
    with d.db() as conn:
        sent = conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NOT NULL",
                            (image["id"],)).fetchone()["n"]
    d.check(sent >= 2, "the lost message was not sent again")


@case("failure before the claim")
def failure_before_the_claim(d: Drill) -> None:
    kill(d.worker("image"))
    with d.db() as conn:   # a claim (ready -> running) waits for a lock the drill holds
        conn.execute("CREATE FUNCTION hold_claim() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                     "PERFORM pg_advisory_xact_lock(4243); RETURN NEW; END $$")
        conn.execute("CREATE TRIGGER hold_claim BEFORE UPDATE OF status ON tasks FOR EACH ROW "
                     "WHEN (NEW.status = 'running' AND NEW.kind = 'image') EXECUTE FUNCTION hold_claim()")
    d.save(lesson(1))
    image = d.task("image")
    with d.system.holding("SELECT pg_advisory_lock(4243)"):
        doomed = d.system.start_worker("image")
        d.system.listening(doomed)
        d.system.waiting_on_lock()
        kill(doomed)   # it took the message from Redis and dies before its claim commits
        d.fault()
    with d.db() as conn:
        conn.execute("DROP TRIGGER hold_claim ON tasks")
    d.check(d.system.task(image["id"])["attempts"] == 0, "the dead worker's claim committed")
    d.system.start_worker("image")
    d.decided(image["id"], ("ready",))
    d.all_succeeded()
    d.check(d.fake.calls_for(idempotency_key(image["fingerprint"], image["id"])).requests == 1,
            "the provider was called more than once")


@case("a duplicate message during backoff")
def duplicate_message_during_backoff(d: Drill) -> None:
    # the provider asks for 30 s of patience: the task waits in `retry` with its time in PostgreSQL
    d.fake.script(Behaviour.fail(429, retry_after=30, endpoint="image"))
    d.save(lesson(1))
    image_id = d.task("image")["id"]
    waiting = wait_until(lambda: (r := d.system.task(image_id))["status"] == "retry" and r,
                         message="the retry scheduled")
    d.check((waiting["available_at"] - waiting["updated_at"]).total_seconds() > 25, "the retry is not 30 s away")
    client = redis.Redis.from_url(d.system.env["REDIS_URL"])
    d.fault()
    dispatch.enqueue(client, [{"id": 0, "task_id": image_id, "queue": "image"}])
    wait_until(lambda: client.llen("rq:queue:image") == 0, message="the duplicate consumed")
    wait_until(lambda: "job_skipped" in d.logs("worker-image"), message="the worker skipping it")
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
    after = d.system.task(image_id)
    d.check((after["status"], after["attempts"], after["available_at"]) == ("retry", 0, waiting["available_at"]),
            "the duplicate message changed the waiting task")
    d.check(len([r for r in d.fake.recorded if r.endpoint == "image"]) == 1, "the duplicate called the provider")


@case("a repeated scan")
def repeated_scan(d: Drill) -> None:
    for name in ("dispatcher", "reconciler"):
        kill(d.stack.procs[name])
    kill(d.worker("image"))
    d.save(lesson(1))   # the web's fast path sends its messages
    image = d.task("image")
    queue = Queue("image", connection=redis.Redis.from_url(d.system.env["REDIS_URL"]))
    wait_until(lambda: queue.count > 0, message="the image's message in its queue")
    queue.empty()
    def lost_by_the_scans_measure():   # sent LOST_DISPATCH_SECONDS ago and not claimed
        with d.db() as conn:
            return conn.execute("SELECT bool_and(sent_at < now() - make_interval(secs => %s)) AS lost FROM outbox "
                                "WHERE task_id = %s", (d.system.cfg.lost_dispatch_seconds, image["id"])).fetchone()["lost"]
    wait_until(lost_by_the_scans_measure, timeout=30, interval=0.2, message="the message counting as lost")
    d.fault()
    for _ in range(3):   # three scans of the same lost message
        d.system.reconcile()
    with d.db() as conn:
        pending = conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NULL",
                               (image["id"],)).fetchone()["n"]
    d.check(pending == 1, f"{pending} pending outbox rows for the lost message after three scans")
    d.observe(f"3 scans, {pending} pending outbox row")
    # a worker listening before the message goes out again: one started after would, on a busy machine, take longer
    # than LOST_DISPATCH_SECONDS (2 s here) to claim it, and the reconciler would rightly send it a third time
    d.system.listening(d.system.start_worker("image"))
    d.restart("dispatcher")
    d.restart("reconciler")
    d.all_succeeded()
    with d.db() as conn:
        sent = conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NOT NULL",
                            (image["id"],)).fetchone()["n"]
    d.check(sent == 2, f"the lost message was sent {sent} times in all, not twice")
    d.recovery_seconds = round(time.monotonic() - d.fault_at, 2)
