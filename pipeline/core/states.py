"""The task state machine as data: statuses and the allowed transitions (the kinds: pipeline/core/kinds/).

Pure: no I/O. The PostgreSQL enums in schema/ must list the same values (a test checks).
"""

from __future__ import annotations

from enum import Enum

from pipeline.core.errors import StaleTransition


class TaskStatus(str, Enum):
    READY = "ready"
    RUNNING = "running"
    RETRY = "retry"
    UNKNOWN = "unknown"
    FAILED = "failed"
    SUCCEEDED = "succeeded"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


S = TaskStatus
TERMINAL = frozenset({S.FAILED, S.SUCCEEDED, S.SUPERSEDED, S.CANCELLED})
UNFINISHED = frozenset({S.READY, S.RUNNING, S.RETRY, S.UNKNOWN})
# Work that still needs a worker: what admission counts.
PENDING = frozenset({S.READY, S.RUNNING, S.RETRY})

# (from, to) -> who may make it. "worker" means the holder of the current lease.
TRANSITIONS: dict[tuple[TaskStatus, TaskStatus], frozenset[str]] = {
    (S.READY, S.RUNNING): frozenset({"worker"}),
    (S.RETRY, S.RUNNING): frozenset({"worker"}),
    (S.RUNNING, S.SUCCEEDED): frozenset({"worker", "reconciler"}),
    (S.RUNNING, S.RETRY): frozenset({"worker", "reconciler"}),
    (S.RUNNING, S.UNKNOWN): frozenset({"worker", "reconciler"}),
    (S.RUNNING, S.FAILED): frozenset({"worker", "reconciler"}),
    (S.READY, S.FAILED): frozenset({"worker", "reconciler"}),      # deadline passed before a claim
    (S.RETRY, S.FAILED): frozenset({"worker", "reconciler"}),
    (S.UNKNOWN, S.FAILED): frozenset({"reconciler", "editor"}),
    (S.UNKNOWN, S.SUCCEEDED): frozenset({"reconciler"}),
    (S.UNKNOWN, S.RETRY): frozenset({"reconciler"}),                # lookup proved nothing was done
    (S.UNKNOWN, S.READY): frozenset({"editor"}),                    # accepting a possible duplicate charge
    (S.FAILED, S.READY): frozenset({"editor"}),                     # manual retry reopens the budget
    **{(s, S.SUPERSEDED): frozenset({"save", "reconciler"}) for s in UNFINISHED},
    **{(s, S.CANCELLED): frozenset({"editor", "worker", "reconciler"}) for s in UNFINISHED},
}


def check_transition(current: TaskStatus | str, target: TaskStatus | str, actor: str) -> None:
    """Raise StaleTransition unless `actor` may move a task from `current` to `target`."""
    current, target = TaskStatus(current), TaskStatus(target)
    allowed = TRANSITIONS.get((current, target))
    if allowed is None:
        raise StaleTransition(f"a task cannot go from {current.value} to {target.value}")
    if actor not in allowed:
        raise StaleTransition(f"{actor} may not move a task from {current.value} to {target.value}; "
                              f"only {', '.join(sorted(allowed))} may")
