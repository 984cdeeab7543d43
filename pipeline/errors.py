"""The one exception tree of the project.

Everything we raise on purpose derives from `PipelineError`. Provider adapters
may import this module (and nothing else of ours): they translate third-party
errors into the four provider classes below, once, at their boundary.
This module imports nothing of ours and does no I/O.
"""

from __future__ import annotations


class PipelineError(Exception):
    """Root of every error this project raises on purpose."""


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


# Provider errors: how a call ended, as far as money is concerned.

class ProviderError(PipelineError):
    """A provider call did not produce a result."""

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


class Permanent(ProviderError):
    """The provider refused the request for good (bad input, auth): do not retry."""


class Transient(ProviderError):
    """The request provably never reached the provider: safe to retry."""


class Ambiguous(ProviderError):
    """The request may have been executed (and charged): the outcome is unknown."""


class Busy(ProviderError):
    """Rate limited or no free slot: try later without spending an attempt."""

    def __init__(self, message: str, *, retry_after: float = 1.0, http_status: int | None = None) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after


class WaitingForInput(Busy):
    """Another task is making the same input right now: wait for its asset, spend no attempt."""

    waiting_for = "input"


class BudgetReached(Busy):
    """The call would pass a spend limit: it is not made; the task waits, spending no attempt."""

    waiting_for = "budget"


class Cancelled(PipelineError):
    """The task's version was cancelled while this worker held it."""
