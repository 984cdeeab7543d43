"""Retry policy: what a failed attempt turns into, and what a call's error means for money.

Pure: `now` and the random source are passed in. The executor asks `as_decided` what a
provider's error means once the provider was called, and `unpaid` whether the call's
booked cost may be given back; the worker and the reconciler both turn failures into an
`Outcome` here (`after_failure`, `retry_or_fail`).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta

from pipeline.core.errors import (Ambiguous, Busy, Cancelled, LeaseLost, ModelGone, Permanent, ProviderError, Refused,
                                  SlotsBusy, Transient, WaitingForInput)
from pipeline.core.outcome import Outcome, Reason
from pipeline.core.records import clip
from pipeline.core.states import TaskStatus

WAITS = {"input": Reason.WAITING_INPUT, "budget": Reason.BUDGET,   # Busy subclasses' `waiting_for`
         "storage": Reason.STORAGE}
WOKEN = (SlotsBusy, WaitingForInput)   # waits a release ends (a slot freed, the input's holder done), not a timer


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return rng.uniform(0, ceiling)


def retry_or_fail(reason: str, *, attempts: int, max_attempts: int, now: datetime, deadline: datetime,
                  base: float, cap: float, rng: random.Random, code: Reason = Reason.TRANSIENT,
                  say_why: bool = False) -> Outcome:
    """Retry after a backoff while attempts and time are left; else fail with a dead letter.

    `say_why`: the failure's reason names why it failed ("...; attempts exhausted"), as the
    reconciler records it; the worker records the error alone.
    """
    if attempts >= max_attempts:
        return _dead(Reason.ATTEMPTS_EXHAUSTED, "attempts exhausted", reason, say_why)
    at = now + timedelta(seconds=backoff_seconds(attempts, base, cap, rng))
    if at >= deadline:
        return _dead(Reason.DEADLINE_PASSED, "deadline passed", reason, say_why)
    return Outcome(TaskStatus.RETRY, code, reason, error=reason, available_at=at)


def _dead(code: Reason, why: str, reason: str, say_why: bool) -> Outcome:
    text = f"{reason}; {why}" if say_why else reason
    return Outcome(TaskStatus.FAILED, code, text, error=text, dead_letter=why)


def after_failure(error: Exception, *, attempts: int, max_attempts: int, now: datetime, deadline: datetime,
                  base: float, cap: float, rng: random.Random) -> Outcome:
    """Decide the next status of a running task whose attempt raised `error`."""
    message = f"{error.__class__.__name__}: {error}"
    details = {"error_class": error.__class__.__name__}
    if isinstance(error, Ambiguous):
        return _with(Outcome(TaskStatus.UNKNOWN, Reason.UNKNOWN_OUTCOME, f"outcome unknown ({message})"), details)
    if isinstance(error, Refused):   # never retried by itself: a person rewrites the prompt, or asks again
        return _with(Outcome(TaskStatus.FAILED, Reason.REFUSED, message, dead_letter="refused by the provider"),
                     details)
    if isinstance(error, ModelGone):   # no call with this model can succeed: a person sets a live one, then retries
        return _with(Outcome(TaskStatus.FAILED, Reason.MODEL_GONE, message, dead_letter="model no longer served"),
                     details)
    if isinstance(error, Permanent):
        return _with(Outcome(TaskStatus.FAILED, Reason.PERMANENT_ERROR, message, dead_letter="permanent error"), details)
    if isinstance(error, Busy):
        at = now + timedelta(seconds=max(0.0, error.retry_after))
        if isinstance(error, WOKEN) and at >= deadline:   # its release may wake it any moment before the deadline
            at = deadline
        elif at >= deadline:
            return _with(Outcome(TaskStatus.FAILED, Reason.DEADLINE_PASSED, message,
                                 dead_letter="deadline passed while busy"), details)
        waiting_for = getattr(error, "waiting_for", None)
        return _with(Outcome(TaskStatus.RETRY, WAITS.get(waiting_for, Reason.BUSY), f"busy ({message})",
                             available_at=at, refund_attempt=True, waiting_for=waiting_for), details)
    if not isinstance(error, Transient):
        # An error we did not classify may have happened after the provider acted: never assume it did not.
        return _with(Outcome(TaskStatus.UNKNOWN, Reason.UNCLASSIFIED_ERROR, f"unclassified error ({message})"), details)
    decided = retry_or_fail(message, attempts=attempts, max_attempts=max_attempts, now=now, deadline=deadline,
                            base=base, cap=cap, rng=rng)
    return _with(decided, details)


def input_wait_seconds(held_until: datetime, *, now: datetime, lease_seconds: float) -> float:
    """How long a task parks behind the holder of its input before it looks again by itself: a second past the
    hold's end, or a lease when the hold has run out and its holder is still to be decided; at least a second.

    The holder's release wakes it sooner, whoever holds the input: a synchronous call's hold runs a lease at a time
    (heartbeats renew it), a batch line's lasts until its task's deadline. `after_failure` ends the wait at the
    waiter's own deadline instead of failing it before (`WOKEN`)."""
    wait = lease_seconds if held_until <= now else (held_until - now).total_seconds() + 1
    return max(1.0, wait)


def _with(outcome: Outcome, details: dict) -> Outcome:
    """The outcome of a failed attempt: its reason is the error it records, its event names the error's class."""
    return Outcome(outcome.to, outcome.code, outcome.reason, error=clip(outcome.reason),
                   available_at=outcome.available_at, refund_attempt=outcome.refund_attempt,
                   waiting_for=outcome.waiting_for, dead_letter=outcome.dead_letter, details=details)


def as_decided(error: ProviderError, *, honours_idempotency_key: bool) -> ProviderError:
    """What a provider's error means for the task once the provider was called (the money rule).

    An `Ambiguous` answer from a provider that honours idempotency keys (*_HONOURS_IDEMPOTENCY_KEY)
    becomes `Transient`: a repeat with the same key returns the first result instead of charging
    again. The caller raises the returned error `from` the provider's, so `unpaid` still sees that
    the call may have been charged. Any other error means what it says (the same object).
    """
    if isinstance(error, Ambiguous) and honours_idempotency_key:
        return Transient(f"{error} (safe to repeat: the provider honours idempotency keys)",
                         http_status=error.http_status)
    return error


def may_have_charged(error: ProviderError, *, replay: bool) -> bool:
    """Whether the ledger books the call's cost: an Ambiguous answer may have been charged, unless the
    call repeated a key the provider had already charged (a replay is booked once, on its first call)."""
    return isinstance(error, Ambiguous) and not replay


def unpaid(error: BaseException) -> bool:
    """True when the call provably cost nothing: never sent, refused, or stopped before the provider acted.

    An Ambiguous answer that a key-honouring provider makes safe to repeat (Transient caused by
    Ambiguous) may still have been charged: its booking stays.
    """
    if isinstance(error.__cause__, Ambiguous):
        return False
    return isinstance(error, (Transient, Busy, Permanent, Cancelled, LeaseLost))
