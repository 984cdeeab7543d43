"""The transition table and the reconciler's decisions, as plain values (pipeline/core/states.py, recovery.py)."""

import random
from datetime import datetime, timedelta, timezone

import pytest

from pipeline.core import recovery
from pipeline.core.errors import StaleTransition
from pipeline.core.outcome import Reason
from pipeline.core.records import Asset
from pipeline.core.states import TaskStatus, check_transition

NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_terminal_states_change_only_through_recorded_editor_actions():
    check_transition("failed", "ready", "editor")
    check_transition("unknown", "ready", "editor")
    for actor in ("worker", "reconciler"):
        with pytest.raises(StaleTransition):
            check_transition("failed", "ready", actor)
        with pytest.raises(StaleTransition, match="may not"):
            check_transition("unknown", "ready", actor)
    with pytest.raises(StaleTransition, match="cannot go from succeeded"):
        check_transition("succeeded", "running", "worker")


def ev(**kw):
    base = dict(task_id=1, status=TaskStatus.RUNNING, lease_token="t", attempts=1, max_attempts=3,
                deadline_at=NOW + timedelta(hours=1), cancel_requested=False, sees_receipts=True)
    return recovery.Evidence(**{**base, **kw})


def decide(e):
    return recovery.decide_expired(e, NOW, base=1, cap=30, rng=random.Random(1))


def test_an_expired_lease_without_intent_is_retried_and_with_intent_becomes_unknown():
    assert decide(ev()).to is TaskStatus.RETRY
    assert decide(ev(intent=True, lookup=recovery.UNSUPPORTED)).to is TaskStatus.UNKNOWN
    assert decide(ev(intent=True, lookup=recovery.NO_ANSWER)).to is TaskStatus.UNKNOWN
    assert decide(ev(intent=True, lookup=recovery.NOT_FOUND)).to is TaskStatus.RETRY
    assert decide(ev(attempts=3)).dead_letter == "attempts exhausted"


def test_a_missing_intent_in_a_store_the_reconciler_cannot_see_is_unknown_unless_the_provider_says_never():
    unseen = decide(ev(sees_receipts=False, lookup=recovery.UNSUPPORTED))
    assert (unseen.to, unseen.code) == (TaskStatus.UNKNOWN, Reason.LEASE_EXPIRED)
    assert "cannot see" in unseen.reason
    assert decide(ev(sees_receipts=False, lookup=recovery.NO_ANSWER)).to is TaskStatus.UNKNOWN
    assert decide(ev(sees_receipts=False, lookup=recovery.NOT_FOUND)).to is TaskStatus.RETRY
    assert decide(ev(sees_receipts=False, cancel_requested=True)).to is TaskStatus.CANCELLED


def test_evidence_assumes_nothing_about_the_store_unless_told():
    assert recovery.Evidence(1, TaskStatus.RUNNING, "t", 1, 3, NOW, False).sees_receipts is False


def test_an_expired_lease_with_a_kept_result_succeeds_from_it():
    asset = Asset("a" * 64, "image/webp", 10)
    found = decide(ev(intent=True, asset=asset))
    assert (found.to, found.event, found.asset) == (TaskStatus.SUCCEEDED, "recovered_from_receipt", asset)
    looked = decide(ev(intent=True, asset=asset, lookup=recovery.FOUND))
    assert looked.event == "recovered_by_lookup"


def test_a_cancelled_or_late_task_is_never_retried():
    assert decide(ev(cancel_requested=True)).to is TaskStatus.CANCELLED
    late = decide(ev(deadline_at=NOW - timedelta(seconds=1)))
    assert (late.to, late.dead_letter) == (TaskStatus.FAILED, "deadline passed")


def test_an_unknown_task_stays_unknown_unless_the_provider_answers():
    d = lambda e: recovery.decide_unknown(e, NOW, base=1, cap=30, rng=random.Random(1))  # noqa: E731
    assert d(ev(status=TaskStatus.UNKNOWN, lookup=recovery.UNSUPPORTED)).to is None
    assert d(ev(status=TaskStatus.UNKNOWN, lookup=recovery.NOT_FOUND)).to is TaskStatus.RETRY
