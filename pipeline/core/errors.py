"""The pipeline's exception tree, and the providers' vocabulary it speaks too.

Everything the system raises on purpose derives from one root, `PipelineError` (defined with the providers'
errors on the lowest floor, providers/errors.py, and re-exported here). How a provider call ended is the
providers' own vocabulary (`ProviderError` and its four classes Permanent, Transient, Ambiguous, Busy),
re-exported here because the pipeline's decisions are made in it. The pipeline's own waits
(`WaitingForInput`, `SlotsBusy`, `BudgetReached`, `StorageUnavailable`) are `Busy`, so the retry policy treats
them alike, and a paid result the store never took (`ResultNotStored`) is `Ambiguous`. This module does no I/O.
"""

from __future__ import annotations

from providers.errors import Ambiguous, Busy, ModelGone, Permanent, PipelineError, ProviderError, Refused, Transient

__all__ = ["PipelineError", "InvalidInput", "NotFound", "Conflict", "CapacityExceeded", "KeyLimitReached",
           "LeaseLost", "StaleTransition", "ConfigError", "Cancelled", "WaitingForInput", "BudgetReached",
           "StorageUnavailable", "ResultNotStored",
           # the providers' vocabulary (providers/errors.py), which the pipeline's decisions speak too
           "ProviderError", "Permanent", "Refused", "ModelGone", "Transient", "Ambiguous", "Busy"]


class InvalidInput(PipelineError, ValueError):
    """Input that breaks a documented rule; `field` names the offending part."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


class NotFound(PipelineError, LookupError):
    """A content, version or task id that does not exist."""


class Conflict(PipelineError):
    """The request is valid but the current state forbids it (stale base, wrong status)."""

    def __init__(self, message: str, code: str = "conflict", details: dict | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.details = details or {}


class CapacityExceeded(PipelineError):
    """Admission refused: accepting the save would exceed MAX_PENDING_TASKS."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class KeyLimitReached(PipelineError):
    """One key's own limit (pending tasks, saves per minute) refused a save: nothing was written."""

    def __init__(self, message: str, retry_after: int) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class LeaseLost(PipelineError):
    """A fenced write matched no row: this worker no longer holds the task's lease."""


class StaleTransition(PipelineError):
    """A guarded state change matched no row: the task is no longer in the expected state."""


class ConfigError(PipelineError, ValueError):
    """A setting is missing or invalid; the message names the variable and the fix."""


class WaitingForInput(Busy):
    """Another task is making the same input right now: wait for its asset, spend no attempt."""

    waiting_for = "input"


class SlotsBusy(Busy):
    """Every call slot this task may use is taken: wait, spending no attempt, until a slot frees and wakes it
    (`wake_slot_waiters`); `retry_after` is the timer that ends a wait nothing woke."""

    waiting_for = "slot"


class BudgetReached(Busy):
    """The call would pass a spend limit: it is not made; the task waits, spending no attempt."""

    waiting_for = "budget"


class StorageUnavailable(Busy):
    """The store of receipts and media refused a write before any paid call (a full disk, a read-only directory,
    a refusing bucket): the task waits, spending no attempt, `retry_after` being a capped, jittered backoff that
    grows while the store keeps failing; never past the task's deadline."""

    waiting_for = "storage"


class ResultNotStored(Ambiguous):
    """A paid call's result could not be stored within its attempt's time: only the provider knows it now, so the
    task is `unknown` (invariant 3), never paid for again unasked."""


class Cancelled(PipelineError):
    """The task's version was cancelled while this worker held it."""
