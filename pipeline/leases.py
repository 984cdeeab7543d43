"""A task's lease: issued by the claim, read right before a paid call, renewed by the heartbeats.

The claim (`claim`, and for a worker `claim_and_take`) moves a runnable task to `running` under a
new lease token, bumping its attempts; a duplicate or early message claims nothing. Everything a
worker writes afterwards is fenced by that token (`pipeline.tasks.apply`). `look` reads the lease
without writing; `heartbeat` extends it, with the hold on the task's input. Each function is one
short transaction, or runs in its caller's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import psycopg

from pipeline import db
from pipeline.core.records import Asset, Task
from pipeline.core.states import TaskStatus, check_transition

S = TaskStatus


def claim(conn: psycopg.Connection, task_id: int, *, worker: str, lease_seconds: float,
          rq_job_id: str | None = None, attempt_seconds: float = 86_400.0,
          receipt_store: str | None = None) -> Task | None:
    """Take the task for one attempt, or None when it is not runnable now (nothing is changed then).

    The attempt ends at the latest `attempt_seconds` after the claim, or at the task's deadline.
    `receipt_store` names the store the worker writes this attempt's receipts to (None: not known).
    """
    with conn.transaction():
        row = _claim_query(conn, task_id, uuid.uuid4(), worker, lease_seconds, rq_job_id, attempt_seconds,
                           receipt_store).fetchone()
    return None if row is None else Task.from_row(row)


def claim_and_take(conn: psycopg.Connection, task_id: int, *, worker: str, lease_seconds: float,
                   rq_job_id: str | None = None, attempt_seconds: float = 86_400.0,
                   receipt_store: str | None = None) -> tuple[Task, Asset | None, bool, dict | None] | None:
    """`claim` in the caller's transaction, with the hold on the input's one paid call (`tasks.take_input`) and a
    look at the input's stored asset after that take; the task, that asset (None: none yet, or a bundle),
    whether we hold the input, and the provider's earlier refusal of the input (None: none).

    In pipeline mode this is one round trip: the take and the look name the task by the lease the claim takes,
    so they do nothing unless the claim did. The look is a statement of its own, so it sees an asset the input's
    holder stored just before it let go of the input.
    """
    token = uuid.uuid4()
    claim = _claim_query(conn, task_id, token, worker, lease_seconds, rq_job_id, attempt_seconds, receipt_store)
    took = db.execute(conn, "input_calls_take", {"task_id": task_id, "lease_token": token,
                                                 "hold_seconds": lease_seconds})
    look = db.execute(conn, "asset_inputs_find_of_task", {"task_id": task_id})
    refused = db.execute(conn, "refused_inputs_of_task", {"task_id": task_id})
    row, holder, stored, refusal = claim.fetchone(), took.fetchone(), look.fetchone(), refused.fetchone()
    if row is None:
        return None
    task = Task.from_row(row)
    holds = holder is not None and holder["task_id"] == task.id
    return task, Asset.from_row(stored) if stored else None, holds, refusal


def _claim_query(conn: psycopg.Connection, task_id: int, token: uuid.UUID, worker: str, lease_seconds: float,
                 rq_job_id: str | None, attempt_seconds: float, receipt_store: str | None) -> psycopg.Cursor:
    check_transition(S.READY, S.RUNNING, "worker")
    check_transition(S.RETRY, S.RUNNING, "worker")
    return db.execute(conn, "tasks_claim", {"task_id": task_id, "lease_token": token, "worker": worker,
                                            "lease_seconds": lease_seconds, "rq_job_id": rq_job_id,
                                            "attempt_seconds": attempt_seconds, "receipt_store": receipt_store})


@dataclass(frozen=True)
class Beat:
    alive: bool                 # False: the lease is gone (superseded, expired and taken, cancelled)
    cancel_requested: bool
    seconds_left: float | None = None   # the lease's time left, when only looked at (`look`)


def look(conn: psycopg.Connection, task: Task) -> Beat:
    """The lease as it stands, read only: whether it is held, its time left, and whether a cancel was requested."""
    row = db.one(conn, "tasks_lease_look", {"task_id": task.id, "lease_token": task.lease_token})
    return Beat(alive=row is not None, cancel_requested=bool(row and row["cancel_requested"]),
                seconds_left=row["seconds_left"] if row else None)


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
