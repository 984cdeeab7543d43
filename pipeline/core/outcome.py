"""One decision about a task (`Outcome`) and the code that says why (`Reason`). Pure.

The retry policy (`policy`), the reconciler's rules (`recovery`) and the worker's own
exits (a success, a reuse, a cancel) all decide an `Outcome`; `pipeline.tasks.apply`
writes every one of them the same way. The `Reason` of the last decision that recorded
an error is stored beside that error (`tasks.last_error_code`), so the web says it in
words without reading the error's text.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from pipeline.core.records import Asset
from pipeline.core.states import TaskStatus


class Reason(str, Enum):
    """Why a decision moved a task. The PostgreSQL enum `task_reason` lists the same values (a test checks)."""

    SUCCEEDED = "succeeded"                    # the call's result is stored
    REUSED = "reused"                          # an identical input had already produced the asset
    RECOVERED = "recovered"                    # the reconciler found the result (receipt or lookup)
    TRANSIENT = "transient"                    # the request provably never reached the provider: retry
    BUSY = "busy"                              # rate limited or no free slot: retry, no attempt spent
    WAITING_INPUT = "waiting_input"            # another task makes the same input: wait, no attempt spent
    BUDGET = "budget"                          # a spend limit is reached: wait, no attempt spent
    STORAGE = "storage"                        # the store of receipts and media cannot be written: wait, no attempt
    UNKNOWN_OUTCOME = "unknown_outcome"        # the provider may have acted (and charged): unknown
    UNCLASSIFIED_ERROR = "unclassified_error"  # an error we cannot classify: unknown, never retried
    PERMANENT_ERROR = "permanent_error"        # the provider refused for good: failed
    REFUSED = "refused"                        # the provider's safety system refused the prompt: failed, rewrite it
    MODEL_GONE = "model_gone"                  # the provider no longer serves the model: failed, set a live one
    ATTEMPTS_EXHAUSTED = "attempts_exhausted"  # failed: no attempt left
    DEADLINE_PASSED = "deadline_passed"        # failed: the version's deadline passed
    LEASE_EXPIRED = "lease_expired"            # the worker stopped answering (retry before the call, else unknown)
    NOT_EXECUTED = "not_executed"              # the provider's lookup says the call never ran: retry
    CANCELLED = "cancelled"                    # the version was cancelled
    RESOLVED = "resolved"                      # an editor closed an unknown task as failed


@dataclass(frozen=True)
class Outcome:
    """Where one task goes, why, and what is written with the move.

    `to` None leaves the task as it is. `error` is what the task records as its last error
    (None clears it); the event and the dead letter record `reason`.
    """

    to: TaskStatus | None
    code: Reason
    reason: str
    error: str | None = None
    available_at: datetime | None = None     # retry: when it may run again
    refund_attempt: bool = False             # a wait: the attempt did not count
    waiting_for: str | None = None           # a wait for an input or a budget, which the board shows
    dead_letter: str | None = None           # failed for good: the dead letter's reason
    event: str = "transition"                # or recovered_from_receipt / recovered_by_lookup
    asset: Asset | None = None               # succeeded: the stored result
    details: dict | None = None              # the event's details


def succeeded(asset: Asset, *, reason: str = "succeeded", code: Reason = Reason.SUCCEEDED,
              details: dict | None = None, event: str = "transition") -> Outcome:
    """The attempt's result (or an identical input's) is stored as `asset`."""
    return Outcome(TaskStatus.SUCCEEDED, code, reason, asset=asset, details=details, event=event)


def cancelled(reason: str = "version cancelled") -> Outcome:
    """The worker stops because its version was cancelled; nothing is recorded as an error."""
    return Outcome(TaskStatus.CANCELLED, Reason.CANCELLED, reason)
