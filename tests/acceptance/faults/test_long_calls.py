"""A provider call may outlast the lease: the heartbeat keeps the lease while it runs."""

from __future__ import annotations

from testkit.fakeprovider import Behaviour
from testkit.helpers import wait_until


def test_a_call_three_times_longer_than_the_lease_succeeds_once_under_one_lease(system, fake):
    # given: leases of 3 s renewed every 0.5 s, and a provider that takes 9 s to answer
    slow = system.with_env(IMAGE_READ_TIMEOUT="20")
    slow.start_worker("image")
    fake.script(Behaviour("delay", seconds=9, endpoint="image"))
    _, image_id = slow.save_lesson()
    slow.dispatch()
    # while the call runs, the reconciler finds no expired lease to take over
    wait_until(lambda: fake.in_flight("image") == 1, timeout=60, message="the call in flight")
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
