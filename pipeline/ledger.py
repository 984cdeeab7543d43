"""The call ledger (provider_calls): one row per provider call, reuse or replay, with its cost.

The executor records each call it makes, right after it (`record_call`), and asks whether
a key was already charged (`key_charged`); a worker that reuses an asset records the
reuse in the completion's transaction. The spend report and the board read the ledger
through their own queries (ledger.sql). It knows nothing of leases or receipts.
"""

from __future__ import annotations

import psycopg

from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.core.records import Task


def record_call(conn: psycopg.Connection, task: Task, *, provider: str, model: str, idempotency_key: str,
                outcome: str, http_status: int | None, latency_ms: int | None, cost: float,
                estimated_cost: float | None = None, reported_cost: float | None = None,
                list_cost: float | None = None, usage: dict | None = None, batch_id: int | None = None) -> None:
    """One row of the call ledger for the task's current attempt: `cost` counts as spent (the reported figure
    where the provider gave one, else the estimate); a batch line names its batch and its synchronous price."""
    db.execute(conn, "provider_calls_insert", {
        "task_id": task.id, "attempt": task.attempts, "provider": provider, "model": model,
        "idempotency_key": idempotency_key, "outcome": outcome, "http_status": http_status,
        "latency_ms": latency_ms, "cost": cost, "accepted_by": None, "estimated_cost": estimated_cost,
        "reported_cost": reported_cost, "list_cost": list_cost, "usage": Jsonb(usage) if usage else None,
        "batch_id": batch_id})


def record_reuse(conn: psycopg.Connection, task: Task, provider: str) -> None:
    """The attempt paid nothing: an identical input's asset, made by `provider`, was reused."""
    record_call(conn, task, provider=provider, model=task.input.get("model", task.kind), idempotency_key="-",
                outcome="reused", http_status=None, latency_ms=0, cost=0)


def key_charged(conn: psycopg.Connection, idempotency_key: str) -> bool:
    """Whether an earlier call with this idempotency key may have been charged (an Ambiguous answer with a cost)."""
    return bool(db.scalar(conn, "provider_calls_key_charged", {"idempotency_key": idempotency_key}))
