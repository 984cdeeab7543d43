"""The approval record comes from the events alone (pipeline.core.approvals): no service needed."""

from datetime import datetime, timedelta, timezone

from pipeline.core.approvals import record

T0 = datetime(2026, 12, 6, 1, 43, 5, tzinfo=timezone.utc)


def event(action: str, version: int, actor: str, minutes: int, reason: str = "") -> dict:
    return {"action": action, "version": version, "actor": actor, "at": T0 + timedelta(minutes=minutes),
            "reason": reason}


def test_a_second_approval_of_a_version_by_another_person_is_the_approval_in_force():
    # given: lab approves v1; a reviewer approves v3, withdraws it, approves v1 again
    walk = [event("approved", 1, "lab", 0), event("approved", 3, "ann", 2),
            event("approval_withdrawn", 3, "ann", 4, "wrong picture"), event("approved", 1, "ann", 6)]
    # when
    found = record(walk)
    # then: v1, by the reviewer, at the later time; nothing else is approved
    assert (found.approved_version, found.current.by, found.current.at) == (1, "ann", T0 + timedelta(minutes=6))
    assert found.approval_of(3) is None and found.approval_of(1) is found.current
    assert [(s.action, s.version, s.by, s.by_version) for s in found.history] == [
        ("approved", 1, "lab", None), ("replaced", 1, "ann", 3), ("approved", 3, "ann", None),
        ("withdrawn", 3, "ann", None), ("approved", 1, "ann", None)]
    assert found.history[3].note == "wrong picture"


def test_after_a_withdrawal_nothing_is_approved_whoever_approved_before():
    found = record([event("approved", 1, "lab", 0), event("approved", 2, "ann", 1),
                    event("approval_withdrawn", 2, "ann", 2, "x")])
    assert found.current is None and found.approved_version is None
    assert all(found.approval_of(n) is None for n in (1, 2))


def test_other_events_and_no_events_leave_the_record_empty():
    assert record([]).history == () and record([]).current is None
    assert record([event("rejected", 1, "ann", 0)]).history == ()
