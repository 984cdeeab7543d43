"""Claim, heartbeat and fenced exits from `running`.

Every exit from `running` is one guarded UPDATE on (id, lease_token, status='running'):
zero rows means this worker no longer holds the lease, and it raises `LeaseLost`
having written nothing. Each function is one short transaction; none is open
while the work itself runs.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.core import policy
from pipeline.core.errors import LeaseLost, WaitingForInput
from pipeline.core.outcome import Outcome, cancelled
from pipeline.core.records import Asset, Task
from pipeline.core.states import TaskStatus
from pipeline.settings import Settings


def claim(conn: psycopg.Connection, task_id: int, *, worker: str, lease_seconds: float,
          rq_job_id: str | None = None) -> Task | None:
    """Take the task for one attempt, or None when it is not runnable now (nothing is changed then)."""
    with conn.transaction():
        row = db.one(conn, "tasks_claim", {"task_id": task_id, "lease_token": uuid.uuid4(), "worker": worker,
                                           "lease_seconds": lease_seconds, "rq_job_id": rq_job_id})
    return Task.from_row(row) if row else None


def fail_if_past_deadline(conn: psycopg.Connection, task_id: int, *, actor: str) -> bool:
    with conn.transaction():
        return db.one(conn, "tasks_fail_past_deadline", {"task_id": task_id, "actor": actor}) is not None


@dataclass(frozen=True)
class Beat:
    alive: bool                 # False: the lease is gone (superseded, expired and taken, cancelled)
    cancel_requested: bool


def heartbeat(conn: psycopg.Connection, task: Task, lease_seconds: float) -> Beat:
    """Extend the lease, and the hold on the task's input while its call runs (even once the lease is lost:
    a call already made stays the only one for its input until its result is stored)."""
    with conn.transaction():
        row = db.one(conn, "tasks_heartbeat", {"task_id": task.id, "lease_token": task.lease_token,
                                               "lease_seconds": lease_seconds})
        if task.kind != "bundle":
            db.execute(conn, "input_calls_renew", {"fingerprint": task.fingerprint, "lease_token": task.lease_token,
                                                   "hold_seconds": lease_seconds})
    return Beat(alive=row is not None, cancel_requested=bool(row and row["cancel_requested"]))


def take_input(conn: psycopg.Connection, task: Task, hold_seconds: float) -> bool:
    """Hold the right to make the one paid call for this task's input; False when another task holds it."""
    with conn.transaction():
        row = db.one(conn, "input_calls_take", {"fingerprint": task.fingerprint, "task_id": task.id,
                                                "lease_token": task.lease_token, "hold_seconds": hold_seconds})
    return row is not None and row["task_id"] == task.id


def wait_for_input(conn: psycopg.Connection, task: Task, cfg: Settings, *, actor: str,
                   now: datetime) -> Outcome | None:
    """Park the task until the holder of its input is done, spending no attempt; None if nobody holds it now.

    The holder's row is locked while we park, so its release (which wakes the waiters) comes after.
    """
    with conn.transaction():
        holder = db.one(conn, "input_calls_holder", {"fingerprint": task.fingerprint})
        if holder is None or holder["task_id"] == task.id:
            return None
        live = holder["held_until"] > now
        wait = (holder["held_until"] - now).total_seconds() + 1 if live else cfg.lease_seconds
        error = WaitingForInput(f"task {holder['task_id']} ({holder['holder_status']}) is making the same input",
                                retry_after=max(1.0, wait))
        return fail_attempt(conn, task, error, cfg, actor=actor, now=now)


def release_input(conn: psycopg.Connection, task: Task) -> None:
    """Give up the hold on the task's input (nothing is in flight) and wake the tasks waiting for it."""
    if task.kind == "bundle":
        return
    with conn.transaction():
        if db.one(conn, "input_calls_release", {"fingerprint": task.fingerprint,
                                                "lease_token": task.lease_token}) is not None:
            db.execute(conn, "tasks_wake_input_waiters", {"fingerprint": task.fingerprint})


def _finish(conn: psycopg.Connection, task: Task, to: TaskStatus, *, actor: str, reason: str,
            asset: str | None = None, available_at: datetime | None = None, refund: bool = False,
            last_error: str | None = None, details: dict[str, Any] | None = None,
            waiting_for: str | None = None) -> dict | None:
    return db.one(conn, "tasks_finish", {
        "task_id": task.id, "lease_token": task.lease_token, "to_status": to.value, "actor": actor,
        "reason": reason, "asset_sha256": asset, "available_at": available_at, "refund": int(refund),
        "last_error": last_error, "details": Jsonb(details) if details else None, "waiting_for": waiting_for})


def _lost(conn: psycopg.Connection, task: Task, actor: str, wanted: TaskStatus) -> TaskStatus:
    """After a guarded exit matched nothing: cancel if that is why, else raise LeaseLost."""
    if wanted is not TaskStatus.CANCELLED and _finish(conn, task, TaskStatus.CANCELLED, actor=actor,
                                                      reason="version cancelled") is not None:
        return TaskStatus.CANCELLED
    current = db.one(conn, "tasks_get", {"task_id": task.id})
    raise LeaseLost(f"task {task.id}: lease {task.lease_token} is no longer current "
                    f"(status {current['status']}); nothing was written")


def succeed(conn: psycopg.Connection, task: Task, asset: Asset, *, actor: str, reason: str = "succeeded",
            details: dict | None = None, reused_from: str | None = None) -> tuple[TaskStatus, list[int]]:
    """Record the asset and complete the task; returns its status and the outbox rows it unblocked.

    The asset is indexed and the input released even when the lease was lost meanwhile (a
    superseded task whose call was in flight): it was paid for, so newer work reuses it.
    `reused_from`: the provider whose earlier call made the asset; the `reused` event and ledger
    row are written in the same transaction as the completion.
    """
    lost: LeaseLost | None = None
    with conn.transaction():
        db.all(conn, "tasks_lock_dependents", {"task_id": task.id})
        db.execute(conn, "assets_upsert", asset.__dict__)
        db.execute(conn, "asset_inputs_upsert", {"fingerprint": task.fingerprint, "sha256": asset.sha256})
        release_input(conn, task)
        if _finish(conn, task, TaskStatus.SUCCEEDED, actor=actor, reason=reason, asset=asset.sha256,
                   details=details) is None:
            try:
                return _lost(conn, task, actor, TaskStatus.SUCCEEDED), []
            except LeaseLost as exc:
                lost = exc          # commit the asset, then tell the caller
        else:
            if reused_from is not None:
                _record_reuse(conn, task, asset, actor, reused_from)
            unblocked = db.all(conn, "outbox_add_unblocked", {"task_id": task.id})
    if lost is not None:
        raise lost
    return TaskStatus.SUCCEEDED, [row["id"] for row in unblocked]


def _record_reuse(conn: psycopg.Connection, task: Task, asset: Asset, actor: str, provider: str) -> None:
    record_event(conn, task, "reused", actor=actor, reason="an identical input already produced this asset",
                 details={"sha256": asset.sha256})
    db.execute(conn, "provider_calls_insert", {
        "task_id": task.id, "attempt": task.attempts, "provider": provider,
        "model": task.input.get("model", task.kind), "idempotency_key": "-", "outcome": "reused",
        "http_status": None, "latency_ms": 0, "cost": 0, "accepted_by": None})


def fail_attempt(conn: psycopg.Connection, task: Task, error: Exception, cfg: Settings, *, actor: str,
                 now: datetime, rng: random.Random | None = None) -> Outcome:
    """Apply the retry policy to an attempt that raised `error`."""
    outcome = policy.after_failure(error, attempts=task.attempts, max_attempts=task.max_attempts, now=now,
                                   deadline=task.deadline_at, base=cfg.backoff_base_seconds,
                                   cap=cfg.backoff_cap_seconds, rng=rng or random.Random())
    with conn.transaction():
        if outcome.to is not TaskStatus.UNKNOWN:   # an unknown call keeps its input held until a decision
            release_input(conn, task)
        row = _finish(conn, task, outcome.to, actor=actor, reason=outcome.reason,
                      available_at=outcome.available_at, refund=outcome.refund_attempt,
                      last_error=outcome.error, details=outcome.details, waiting_for=outcome.waiting_for)
        if row is None:
            _lost(conn, task, actor, outcome.to)
            return cancelled()
        if outcome.to is TaskStatus.RETRY:
            db.execute(conn, "outbox_add", {"task_id": task.id, "lane": None,   # the version's lane
                                            "available_at": outcome.available_at})
        if outcome.dead_letter:
            db.execute(conn, "dead_letters_insert", {"task_id": task.id, "reason": outcome.dead_letter,
                                                     "last_error": outcome.reason[:2000],
                                                     "attempts": row["attempts"]})
    return outcome


def cancel_running(conn: psycopg.Connection, task: Task, *, actor: str) -> None:
    with conn.transaction():
        release_input(conn, task)
        if _finish(conn, task, TaskStatus.CANCELLED, actor=actor, reason="version cancelled") is None:
            _lost(conn, task, actor, TaskStatus.CANCELLED)


def find_reusable(conn: psycopg.Connection, fingerprint: str) -> Asset | None:
    row = db.one(conn, "asset_inputs_find", {"fingerprint": fingerprint})
    return None if row is None else Asset.from_row(row)


def record_event(conn: psycopg.Connection, task: Task, action: str, *, actor: str, reason: str = "",
                 details: dict | None = None) -> None:
    db.execute(conn, "events_insert", {
        "task_id": task.id, "content_id": task.content_id, "version": task.version, "action": action,
        "actor": actor, "attempt": task.attempts, "lease_token": task.lease_token, "reason": reason,
        "details": Jsonb(details) if details else None})
