"""Who may take a task for an attempt, and how a worker's success leaves `running`. Pure.

These are the specification of the claim and of the fenced success, which PostgreSQL runs as the functions
`attempt_claim` and `attempt_succeed` (schema/0020_attempt_functions.sql);
tests/integration/engine/test_attempt_functions.py drives the same cases through both and requires the same
decisions.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import Enum

from pipeline.core.states import TaskStatus

S = TaskStatus


@dataclass(frozen=True)
class Claimable:
    """What the claim looks at: the task and its version as they stand."""

    status: TaskStatus
    available_at: datetime
    attempts: int
    max_attempts: int
    deadline_at: datetime
    current_version: bool        # the task's version is its content's current one (not superseded)
    cancel_requested: bool       # an editor cancelled the version
    lane_paused: bool            # the version's lane is paused
    unmet_dependencies: int      # dependencies that have not succeeded


def claim_refusal(task: Claimable, now: datetime) -> str | None:
    """Why the task cannot be taken for an attempt now, or None: it may be claimed (attempts + 1, a new lease)."""
    if task.status not in (S.READY, S.RETRY):
        return f"it is {task.status.value}"
    if task.available_at > now:
        return "it is not due yet"
    if task.attempts >= task.max_attempts:
        return "no attempt is left"
    if task.deadline_at <= now:
        return "its deadline passed"
    if not task.current_version:
        return "its version was superseded"
    if task.cancel_requested:
        return "its version was cancelled"
    if task.lane_paused:
        return "its lane is paused"
    if task.unmet_dependencies:
        return "a dependency has not succeeded"
    return None


class Exit(str, Enum):
    """Where a worker's success leaves its task."""

    SUCCEEDED = "succeeded"
    CANCELLED = "cancelled"   # the version was cancelled while the call ran: the cancel wins
    LOST = "lost"             # someone else holds or ended the task: nothing is written to it


def success_exit(status: TaskStatus, holds_lease: bool, cancel_requested: bool) -> Exit:
    """A worker's success, fenced: only the holder of the current lease of a running task moves it. Its paid result
    (the asset for its input, its ledger row) is kept whatever the exit."""
    if status is not S.RUNNING or not holds_lease:
        return Exit.LOST
    return Exit.CANCELLED if cancel_requested else Exit.SUCCEEDED
