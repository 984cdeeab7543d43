"""A stuck task explained: the one line the task page and the API show, from the task's row alone."""

from datetime import datetime, timedelta, timezone

import pytest

from pipeline.core.diagnosis import diagnose

NOW = datetime(2026, 12, 3, 10, 40, tzinfo=timezone.utc)


def row(status="ready", **changes):
    base = {"status": status, "available_at": NOW - timedelta(seconds=1), "attempts": 0, "max_attempts": 3,
            "worker": None, "heartbeat_at": None, "lease_until": None, "waiting_for": None, "dispatches": 0}
    return base | changes


def why(task, unmet=()):
    return diagnose(task, list(unmet), now=NOW, scan_seconds=5, resend_after=60)


def test_a_task_behind_a_dependency_names_it():
    found = why(row(), [{"id": 12, "kind": "image", "status": "running"}, {"id": 13, "kind": "tts", "status": "ready"}])
    assert found.code == "waiting_for_dependency" and found.english() == "waiting for image task 12 (running)"


def test_a_task_backing_off_says_until_when_and_which_attempt_comes():
    found = why(row("retry", attempts=1, available_at=NOW + timedelta(minutes=2)))
    assert found.english() == "backing off until 10:42:00 (attempt 2 of 3)"


@pytest.mark.parametrize("waiting_for,code", [("input", "waiting_for_input"), ("budget", "waiting_for_budget")])
def test_a_task_waiting_for_an_input_or_a_budget_says_so_rather_than_backing_off(waiting_for, code):
    assert why(row("retry", available_at=NOW + timedelta(seconds=30), waiting_for=waiting_for)).code == code


def test_a_due_task_never_sent_points_at_the_dispatcher_and_one_sent_at_the_workers():
    assert why(row()).code == "not_sent"
    sent = why(row(dispatches=2))
    assert sent.code == "queued" and "sent again 60 s after" in sent.english()


def test_a_running_task_shows_its_worker_and_heartbeat_and_once_its_lease_ran_out_when_recovery_takes_it():
    alive = row("running", worker="host-a:4242", heartbeat_at=NOW - timedelta(seconds=4),
                lease_until=NOW + timedelta(seconds=26))
    assert why(alive).english() == "running on host-a:4242, last heartbeat 4 s ago"
    dead = row("running", worker="host-a:4242", heartbeat_at=NOW - timedelta(seconds=95),
               lease_until=NOW - timedelta(seconds=65))
    assert why(dead).english() == ("running, last heartbeat 95 s ago: its lease ran out at 10:38:55, recovery "
                                   "takes it by 10:40:05")
    assert why(row("running", worker="host-a:4242", lease_until=NOW + timedelta(seconds=30))).code == "starting"


def test_an_unknown_outcome_waits_for_a_person_and_a_finished_task_says_how_it_ended():
    assert why(row("unknown")).code == "needs_decision"
    assert why(row("failed"), [{"id": 1, "kind": "image", "status": "failed"}]).english() == "finished: failed"


def test_a_due_task_of_a_paused_lane_says_who_paused_it_and_what_becomes_of_its_deadline():
    paused = row(lane="bulk", lane_paused_at=NOW - timedelta(minutes=5), lane_paused_by="ops@example.com",
                 dispatches=1)
    found = why(paused)
    assert found.code == "lane_paused"
    assert found.english() == ("the bulk lane is paused since 10:35:00 by ops@example.com: it starts when the lane "
                               "resumes, and its deadline moves on by the pause")
    # a dependency not met yet is still the first thing to say, and a running task is running
    assert why(paused, [{"id": 4, "kind": "tts", "status": "ready"}]).code == "waiting_for_dependency"
    assert why(row("running", lane="bulk", lane_paused_at=NOW, lane_paused_by="x", worker="w",
                   heartbeat_at=NOW, lease_until=NOW + timedelta(seconds=20))).code == "running"
