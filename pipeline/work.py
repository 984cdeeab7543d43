"""The seam between the engine and the work itself.

An `Executor` does one attempt of a claimed task and returns the stored asset,
or raises a classified provider error. It gets a `WorkContext` to check, right
before paying, that the lease is still held and the version not cancelled, and
to record each provider call in the ledger. The engine decides what an error
means for the task; the executor only says what happened.
"""

from __future__ import annotations

from typing import Protocol

from pipeline.core.records import Asset, Task


class WorkContext(Protocol):
    def check(self) -> None:
        """Raise LeaseLost or Cancelled when the attempt must stop now; else refresh the lease."""

    def record_call(self, *, provider: str, model: str, idempotency_key: str, outcome: str,
                    http_status: int | None, latency_ms: int | None, cost: float) -> None:
        """Write one row of the call ledger."""


class Executor(Protocol):
    def execute(self, task: Task, ctx: WorkContext) -> Asset:
        ...
