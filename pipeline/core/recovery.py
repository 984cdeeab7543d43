"""What the reconciler should do with a task, decided from evidence. Pure: no I/O.

The evidence (receipts on disk, a provider's lookup answer) is gathered by
`pipeline.reconcile`; these functions only decide, so every rule is testable
with plain values and a pinned `now`. The decision is an `Outcome`, applied by
`pipeline.tasks.apply` exactly as a worker's is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from pipeline.core.outcome import Outcome, Reason, succeeded
from pipeline.core.policy import retry_or_fail
from pipeline.core.records import Asset
from pipeline.core.states import TaskStatus

FOUND, NOT_FOUND, UNSUPPORTED, NO_ANSWER = "found", "not_found", "unsupported", "no_answer"


@dataclass(frozen=True)
class Evidence:
    task_id: int
    status: TaskStatus
    lease_token: str | None
    attempts: int
    max_attempts: int
    deadline_at: datetime
    cancel_requested: bool
    intent: bool = False               # an intent receipt exists for the current attempt
    asset: Asset | None = None         # a result (receipt or lookup) whose file is on disk and verified
    lookup: str | None = None          # FOUND / NOT_FOUND / UNSUPPORTED / NO_ANSWER, when asked
    sees_receipts: bool = False        # the reconciler reads the store the attempt's worker wrote to


def _retry_or_fail(ev: Evidence, now: datetime, reason: str, code: Reason, base: float, cap: float,
                   rng: random.Random) -> Outcome:
    return retry_or_fail(reason, attempts=ev.attempts, max_attempts=ev.max_attempts, now=now, deadline=ev.deadline_at,
                         base=base, cap=cap, rng=rng, code=code, say_why=True)


def _noted(to: TaskStatus, code: Reason, reason: str, **fields) -> Outcome:
    """A move the reconciler records as the task's last error."""
    return Outcome(to, code, reason, error=reason, **fields)


def decide_expired(ev: Evidence, now: datetime, *, base: float, cap: float, rng: random.Random) -> Outcome:
    """A running task whose lease expired: its worker is gone or stalled."""
    if ev.asset is not None:
        event = "recovered_from_receipt" if ev.lookup is None else "recovered_by_lookup"
        return succeeded(ev.asset, reason="result found after the lease expired", code=Reason.RECOVERED, event=event)
    if ev.cancel_requested:
        return _noted(TaskStatus.CANCELLED, Reason.CANCELLED, "version cancelled; lease expired")
    if not ev.intent and ev.sees_receipts:
        if now >= ev.deadline_at:
            return _noted(TaskStatus.FAILED, Reason.DEADLINE_PASSED, "deadline passed", dead_letter="deadline passed")
        return _retry_or_fail(ev, now, "lease expired before the provider was called", Reason.LEASE_EXPIRED,
                              base, cap, rng)
    if ev.lookup == NOT_FOUND:
        return _retry_or_fail(ev, now, "lease expired; the provider says it never ran the call", Reason.NOT_EXECUTED,
                              base, cap, rng)
    if not ev.intent:
        return _noted(TaskStatus.UNKNOWN, Reason.LEASE_EXPIRED,
                      "lease expired; its worker kept receipts in a store this reconciler cannot see, so whether "
                      f"the provider was called is unknown (lookup: {ev.lookup or 'not asked'})")
    return _noted(TaskStatus.UNKNOWN, Reason.LEASE_EXPIRED,
                  "lease expired after the provider was called; its outcome is unknown "
                  f"(lookup: {ev.lookup or 'not asked'})")


def decide_unknown(ev: Evidence, now: datetime, *, base: float, cap: float, rng: random.Random) -> Outcome:
    """An unknown task, after another lookup."""
    if ev.asset is not None:
        return succeeded(ev.asset, reason="the provider's lookup returned the result", code=Reason.RECOVERED,
                         event="recovered_by_lookup")
    if ev.lookup == NOT_FOUND:
        return _retry_or_fail(ev, now, "the provider's lookup says the call never ran", Reason.NOT_EXECUTED,
                              base, cap, rng)
    return Outcome(None, Reason.UNKNOWN_OUTCOME, f"still unknown (lookup: {ev.lookup or 'not supported'})")


def slot_of(now: datetime, seconds: int) -> datetime:
    """The start of the time slot of `seconds` that `now` falls in (slots count from the Unix epoch, in UTC)."""
    epoch = datetime(1970, 1, 1, tzinfo=timezone.utc)
    return epoch + timedelta(seconds=(int((now - epoch).total_seconds()) // seconds) * seconds)
