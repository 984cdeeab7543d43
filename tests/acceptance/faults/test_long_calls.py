"""A provider call may outlast the lease: the heartbeat keeps the lease while it runs; without it, the
reconciler recovers the task by the evidence rules and the late result is refused by the fence."""

from __future__ import annotations

import json
from contextlib import contextmanager

from testkit.fakeprovider import Behaviour
from testkit.helpers import wait_until

# PostgreSQL refuses one task's lease renewals (an UPDATE that keeps it running under the same lease): the
# worker's heartbeat thread meets an error it does not expect and dies, as a broken heartbeat would.
REFUSE_HEARTBEATS = """
CREATE FUNCTION test_refuse_heartbeats() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.id = {task_id} AND OLD.status = 'running' AND NEW.status = 'running'
       AND NEW.lease_token = OLD.lease_token THEN
        RAISE EXCEPTION 'heartbeat of task % refused by the test', NEW.id;
    END IF;
    RETURN NEW;
END $$;
CREATE TRIGGER test_refuse_heartbeats BEFORE UPDATE ON tasks FOR EACH ROW EXECUTE FUNCTION test_refuse_heartbeats();
"""


@contextmanager
def heartbeats_refused(system, task_id: int):
    with system.db() as conn:
        conn.execute(REFUSE_HEARTBEATS.format(task_id=int(task_id)))
    try:
        yield
    finally:
        with system.db() as conn:
            conn.execute("DROP TRIGGER IF EXISTS test_refuse_heartbeats ON tasks; "
                         "DROP FUNCTION IF EXISTS test_refuse_heartbeats()")


def image_call_in_flight(system, fake, seconds: float):
    """A worker whose image call takes `seconds` (the provider's read timeout well past it), that call in flight."""
    slow = system.with_env(IMAGE_READ_TIMEOUT=str(2 * seconds))
    slow.start_worker("image")
    fake.script(Behaviour("delay", seconds=seconds, endpoint="image"))
    _, image_id = slow.save_lesson()
    slow.dispatch()
    wait_until(lambda: fake.in_flight("image") == 1, timeout=60, message="the call in flight")
    return slow, image_id


def test_a_call_three_times_longer_than_the_lease_succeeds_once_under_one_lease(system, fake):
    # given: leases of 3 s renewed every 0.5 s, and a provider that takes 9 s to answer
    slow, image_id = image_call_in_flight(system, fake, 9)
    # while the call runs, the reconciler finds no expired lease to take over
    while fake.in_flight("image"):
        slow.reconcile()
        assert slow.task(image_id)["status"] in ("running", "succeeded")
    row = slow.wait_status(image_id, "succeeded", "unknown", "retry", timeout=40)
    # then: one attempt, one call, one lease from claim to success
    assert (row["status"], row["attempts"]) == ("succeeded", 1)
    assert len([r for r in fake.recorded if r.endpoint == "image"]) == 1
    with slow.db() as conn:
        leases = conn.execute("SELECT count(DISTINCT lease_token) AS n FROM events WHERE task_id = %s "
                              "AND lease_token IS NOT NULL", (image_id,)).fetchone()["n"]
    assert leases == 1


def test_with_its_heartbeat_stopped_a_long_call_loses_its_task_and_its_late_result_is_refused(system, fake):
    # given: leases of 3 s renewed every 0.5 s, and a provider that takes 15 s to answer
    slow, image_id = image_call_in_flight(system, fake, 15)
    claimed = slow.task(image_id)
    # when: the worker's heartbeat stops while the call runs
    with heartbeats_refused(slow, image_id):
        # then: the lease runs out and the reconciler takes the task over, as the evidence says: the intent
        # receipt exists and this provider has no lookup, so the outcome is unknown (never retried by itself)
        runs = []

        def recovered():
            runs.append(slow.reconcile())
            return slow.task(image_id)["status"] != "running"
        wait_until(recovered, timeout=20, message="the reconciler taking the task over")
        assert fake.in_flight("image") == 1   # the call still runs: the takeover happened while it was in flight
    row = slow.task(image_id)
    assert (row["status"], row["last_error_code"], row["attempts"]) == ("unknown", "lease_expired", 1)
    # the reconciler's line about it names the task, the attempt and the lease it took over
    said = [json.loads(line) for line in runs[-1].stderr.splitlines() if line.startswith("{")]
    took = next(line for line in said if line["event"] == "reconciled")
    assert (took["task_id"], took["attempt"], took["lease_token"]) == (image_id, 1, str(claimed["lease_token"]))
    # and when the call ends, the worker's result is refused by the fence: the task stays as the reconciler left it
    wait_until(lambda: fake.in_flight("image") == 0 and any(
        "lease_lost_nothing_written" in path.read_text(errors="replace") for path in slow.logs.glob("worker-image-*")),
        timeout=40, message="the worker finishing its call and logging that its lease was lost")
    row = slow.task(image_id)
    assert (row["status"], row["asset_sha256"], row["attempts"]) == ("unknown", None, 1)
    assert len([r for r in fake.recorded if r.endpoint == "image"]) == 1
    with slow.db() as conn:
        moves = conn.execute("SELECT from_status, to_status, actor FROM events WHERE task_id = %s AND to_status IS "
                             "NOT NULL ORDER BY id", (image_id,)).fetchall()
    assert [(m["from_status"], m["to_status"], m["actor"]) for m in moves] == [
        ("ready", "running", claimed["worker"]), ("running", "unknown", "reconciler")]
