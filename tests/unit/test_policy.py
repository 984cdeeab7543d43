"""The retry policy and the money rule, as plain functions of their inputs (pipeline/core/policy.py)."""

import random
from datetime import datetime, timedelta, timezone

import pytest

from pipeline.core import policy
from pipeline.core.errors import (Ambiguous, BudgetReached, Busy, Cancelled, LeaseLost, Permanent, ResultNotStored,
                                  SlotsBusy, StorageUnavailable, Transient, WaitingForInput)
from pipeline.core.outcome import Reason
from pipeline.core.states import TaskStatus


def test_backoff_is_full_jitter_growing_and_capped():
    import random
    from pipeline.core.policy import backoff_seconds
    rng = random.Random(7)
    samples = {n: [backoff_seconds(n, 1.0, 30.0, rng) for _ in range(2000)] for n in (1, 3, 6, 10)}
    assert max(samples[1]) <= 1.0 and max(samples[3]) <= 4.0 and max(samples[10]) <= 30.0
    assert max(samples[6]) > 20 and min(samples[6]) < 2          # spread over [0, cap]: jitter
    assert sum(samples[3]) / 2000 > sum(samples[1]) / 2000 * 2.5  # grows


NOW = datetime(2026, 1, 1, tzinfo=timezone.utc)


def after(error, attempts=1, max_attempts=3, deadline=NOW + timedelta(hours=1)):
    return policy.after_failure(error, attempts=attempts, max_attempts=max_attempts, now=NOW, deadline=deadline,
                                base=1.0, cap=30.0, rng=random.Random(1))


@pytest.mark.parametrize("error, to, code, dead", [
    (Permanent("refused"), TaskStatus.FAILED, Reason.PERMANENT_ERROR, "permanent error"),
    (Transient("refused"), TaskStatus.RETRY, Reason.TRANSIENT, None),
    (Ambiguous("read timeout"), TaskStatus.UNKNOWN, Reason.UNKNOWN_OUTCOME, None),
    (Busy("429", retry_after=5), TaskStatus.RETRY, Reason.BUSY, None),
    (SlotsBusy("all 4 call slots are in use", retry_after=60), TaskStatus.RETRY, Reason.BUSY, None),
    (WaitingForInput("task 7 makes it", retry_after=5), TaskStatus.RETRY, Reason.WAITING_INPUT, None),
    (BudgetReached("paused: daily budget reached", retry_after=5), TaskStatus.RETRY, Reason.BUDGET, None),
    (StorageUnavailable("could not write the intent receipt", retry_after=2), TaskStatus.RETRY, Reason.STORAGE, None),
    (ResultNotStored("the result could not be stored"), TaskStatus.UNKNOWN, Reason.UNKNOWN_OUTCOME, None),
    (KeyError("boom"), TaskStatus.UNKNOWN, Reason.UNCLASSIFIED_ERROR, None),
])
def test_each_error_class_is_decided_with_its_code(error, to, code, dead):
    decided = after(error)
    assert (decided.to, decided.code, decided.dead_letter) == (to, code, dead)
    assert decided.error == decided.reason and decided.details == {"error_class": error.__class__.__name__}


def test_a_wait_spends_no_attempt_and_says_what_it_waits_for():
    parked = after(WaitingForInput("task 7 makes it", retry_after=5))
    assert parked.refund_attempt and parked.waiting_for == "input" and parked.available_at == NOW + timedelta(seconds=5)
    assert after(Busy("429", retry_after=5)).waiting_for is None


def test_a_store_that_refuses_writes_before_the_call_is_waited_for_without_spending_an_attempt_to_the_deadline():
    # given a task on its last attempt: a wait for the store does not use it up
    waited = after(StorageUnavailable("could not write the intent receipt", retry_after=7), attempts=3)
    assert (waited.to, waited.waiting_for, waited.refund_attempt, waited.available_at) == (
        TaskStatus.RETRY, "storage", True, NOW + timedelta(seconds=7))
    # but the wait never passes the task's deadline: past it, the task fails as a busy one does
    late = after(StorageUnavailable("could not write the intent receipt", retry_after=60),
                 deadline=NOW + timedelta(seconds=30))
    assert (late.to, late.dead_letter) == (TaskStatus.FAILED, "deadline passed while busy")


def test_a_paid_result_the_store_refused_is_unknown_unless_the_provider_answers_its_key_again():
    held = ResultNotStored("the provider answered, but its result could not be stored")
    assert not policy.unpaid(held)   # it was paid for: the booking stays
    assert policy.as_decided(held, honours_idempotency_key=False) is held
    assert isinstance(policy.as_decided(held, honours_idempotency_key=True), Transient)


def test_a_transient_error_fails_when_attempts_or_time_run_out():
    assert after(Transient("x"), attempts=3).code is Reason.ATTEMPTS_EXHAUSTED
    late = after(Transient("x"), deadline=NOW + timedelta(milliseconds=1))
    assert (late.to, late.code, late.dead_letter) == (TaskStatus.FAILED, Reason.DEADLINE_PASSED, "deadline passed")
    busy_late = after(Busy("429", retry_after=60), deadline=NOW + timedelta(seconds=30))
    assert busy_late.dead_letter == "deadline passed while busy"


def test_a_wait_for_a_slot_lasts_at_most_to_the_deadline_instead_of_failing_before_it():
    # a freed slot may wake it any moment before; at the deadline the claim (or the reconciler) fails it
    waited = after(SlotsBusy("all 4 call slots are in use", retry_after=60), deadline=NOW + timedelta(seconds=20))
    assert (waited.to, waited.available_at, waited.waiting_for, waited.refund_attempt) == (
        TaskStatus.RETRY, NOW + timedelta(seconds=20), "slot", True)


def test_a_wait_for_an_input_lasts_at_most_to_the_deadline_instead_of_failing_before_it():
    # a batch line holds its input until its own task's deadline, which may come after the waiter's: the holder's
    # release wakes the waiter before; at its deadline the claim (or the reconciler) fails it
    waited = after(WaitingForInput("task 7 (running) is making the same input", retry_after=90_000),
                   deadline=NOW + timedelta(hours=25))
    assert (waited.to, waited.code, waited.available_at, waited.waiting_for, waited.refund_attempt) == (
        TaskStatus.RETRY, Reason.WAITING_INPUT, NOW + timedelta(hours=25), "input", True)
    assert waited.dead_letter is None


def test_a_task_parked_behind_its_inputs_holder_looks_again_a_second_after_the_hold_ends():
    wait = policy.input_wait_seconds
    assert wait(NOW + timedelta(seconds=20), now=NOW, lease_seconds=30) == 21      # a call's hold, a lease at most
    assert wait(NOW + timedelta(hours=25), now=NOW, lease_seconds=30) == 25 * 3600 + 1   # a batch line's
    assert wait(NOW - timedelta(seconds=5), now=NOW, lease_seconds=30) == 30   # ran out, the holder not yet decided
    assert wait(NOW - timedelta(seconds=5), now=NOW, lease_seconds=0.5) == 1.0


def test_an_ambiguous_answer_is_safe_to_repeat_only_from_a_provider_that_honours_keys():
    ambiguous = Ambiguous("read timeout", http_status=None)
    assert policy.as_decided(ambiguous, honours_idempotency_key=False) is ambiguous
    safe = policy.as_decided(ambiguous, honours_idempotency_key=True)
    assert isinstance(safe, Transient) and "safe to repeat" in str(safe)
    refused = Permanent("no")
    assert policy.as_decided(refused, honours_idempotency_key=True) is refused


def test_only_errors_that_prove_nothing_was_charged_give_the_booking_back():
    for error in (Transient("x"), Busy("x"), Permanent("x"), Cancelled("x"), LeaseLost("x")):
        assert policy.unpaid(error)
    assert not policy.unpaid(Ambiguous("x")) and not policy.unpaid(KeyError("x"))
    made_safe = policy.as_decided(Ambiguous("x"), honours_idempotency_key=True)
    made_safe.__cause__ = Ambiguous("x")     # as the executor raises it: `from` the provider's answer
    assert not policy.unpaid(made_safe)      # it may have been charged: the booking stays


def test_an_ambiguous_answer_is_booked_once_even_when_its_key_is_replayed():
    assert policy.may_have_charged(Ambiguous("x"), replay=False)
    assert not policy.may_have_charged(Ambiguous("x"), replay=True)
    assert not policy.may_have_charged(Transient("x"), replay=False)
