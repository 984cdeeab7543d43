"""What the reconciler should do with a task, decided from evidence. Pure: no I/O.

The evidence (receipts on disk, a provider's lookup answer) is gathered by
`pipeline.reconcile`; these functions only decide, so every rule is testable
with plain values and a pinned `now`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from pipeline.engine import Asset
from pipeline.policy import backoff_seconds
from pipeline.states import TaskStatus

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


@dataclass(frozen=True)
class Action:
    task_id: int
    to: TaskStatus | None              # None: leave the task as it is
    reason: str
    event: str = "transition"          # or recovered_from_receipt / recovered_by_lookup
    asset: Asset | None = None
    available_at: datetime | None = None
    dead_letter: str | None = None


def _retry_or_fail(ev: Evidence, now: datetime, reason: str, base: float, cap: float,
                   rng: random.Random) -> Action:
    if ev.attempts >= ev.max_attempts:
        return Action(ev.task_id, TaskStatus.FAILED, f"{reason}; attempts exhausted", dead_letter="attempts exhausted")
    at = now + timedelta(seconds=backoff_seconds(ev.attempts, base, cap, rng))
    if at >= ev.deadline_at:
        return Action(ev.task_id, TaskStatus.FAILED, f"{reason}; deadline passed", dead_letter="deadline passed")
    return Action(ev.task_id, TaskStatus.RETRY, reason, available_at=at)


def decide_expired(ev: Evidence, now: datetime, *, base: float, cap: float, rng: random.Random) -> Action:
    """A running task whose lease expired: its worker is gone or stalled."""
    if ev.asset is not None:
        event = "recovered_from_receipt" if ev.lookup is None else "recovered_by_lookup"
        return Action(ev.task_id, TaskStatus.SUCCEEDED, "result found after the lease expired", event, ev.asset)
    if ev.cancel_requested:
        return Action(ev.task_id, TaskStatus.CANCELLED, "version cancelled; lease expired")
    if not ev.intent:
        if now >= ev.deadline_at:
            return Action(ev.task_id, TaskStatus.FAILED, "deadline passed", dead_letter="deadline passed")
        return _retry_or_fail(ev, now, "lease expired before the provider was called", base, cap, rng)
    if ev.lookup == NOT_FOUND:
        return _retry_or_fail(ev, now, "lease expired; the provider says it never ran the call", base, cap, rng)
    return Action(ev.task_id, TaskStatus.UNKNOWN,
                  "lease expired after the provider was called; its outcome is unknown "
                  f"(lookup: {ev.lookup or 'not asked'})")


def decide_unknown(ev: Evidence, now: datetime, *, base: float, cap: float, rng: random.Random) -> Action:
    """An unknown task, after another lookup."""
    if ev.asset is not None:
        return Action(ev.task_id, TaskStatus.SUCCEEDED, "the provider's lookup returned the result",
                      "recovered_by_lookup", ev.asset)
    if ev.lookup == NOT_FOUND:
        return _retry_or_fail(ev, now, "the provider's lookup says the call never ran", base, cap, rng)
    return Action(ev.task_id, None, f"still unknown (lookup: {ev.lookup or 'not supported'})")
