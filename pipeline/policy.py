"""Retry policy: what a failed attempt turns into. Pure: `now` and the random source are passed in."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from pipeline.errors import Ambiguous, Busy, Permanent, Transient
from pipeline.states import TaskStatus


def backoff_seconds(attempt: int, base: float, cap: float, rng: random.Random) -> float:
    """Full jitter: uniform in [0, min(cap, base * 2**(attempt-1))]."""
    ceiling = min(cap, base * (2 ** max(0, attempt - 1)))
    return rng.uniform(0, ceiling)


@dataclass(frozen=True)
class Outcome:
    status: TaskStatus
    available_at: datetime | None = None
    refund_attempt: bool = False        # Busy: the attempt did not count
    dead_letter: str | None = None      # reason, when the task is failed for good
    reason: str = ""


def after_failure(error: Exception, *, attempts: int, max_attempts: int, now: datetime, deadline: datetime,
                  base: float, cap: float, rng: random.Random) -> Outcome:
    """Decide the next status of a running task whose attempt raised `error`."""
    message = f"{error.__class__.__name__}: {error}"
    if isinstance(error, Ambiguous):
        return Outcome(TaskStatus.UNKNOWN, reason=f"outcome unknown ({message})")
    if isinstance(error, Permanent):
        return Outcome(TaskStatus.FAILED, dead_letter="permanent error", reason=message)
    if isinstance(error, Busy):
        at = now + timedelta(seconds=max(0.0, error.retry_after))
        if at >= deadline:
            return Outcome(TaskStatus.FAILED, dead_letter="deadline passed while busy", reason=message)
        return Outcome(TaskStatus.RETRY, available_at=at, refund_attempt=True, reason=f"busy ({message})")
    if not isinstance(error, Transient):
        # An error we did not classify may have happened after the provider acted: never assume it did not.
        return Outcome(TaskStatus.UNKNOWN, reason=f"unclassified error ({message})")
    if attempts >= max_attempts:
        return Outcome(TaskStatus.FAILED, dead_letter="attempts exhausted", reason=message)
    at = now + timedelta(seconds=backoff_seconds(attempts, base, cap, rng))
    if at >= deadline:
        return Outcome(TaskStatus.FAILED, dead_letter="deadline passed", reason=message)
    return Outcome(TaskStatus.RETRY, available_at=at, reason=message)
