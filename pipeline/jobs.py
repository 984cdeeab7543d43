"""The RQ job: `run_task(task_id)` does one attempt of one task, fenced by its lease.

The execution path, from a message to a written outcome: the worker (bin/worker.py)
runs `run_task`, which claims the task in one transaction (`pipeline.leases.claim_and_take`:
the claim, the input's one paid call, the asset its input already has and, through the
executor's `prepare`, the provider slot, rate token and booking), reuses that asset or hands
the attempt to the process's executor (`pipeline.executor`, kept by `pipeline.runtime`) under
an `AttemptContext`, and has `pipeline.tasks` apply the outcome (`succeed`, or `fail_attempt`,
which asks the retry policy) in one more transaction, with the call's ledger row and the
slot's release (`executor.Settlement`). A message carries only the task id. Whether there is
anything to do is decided by the claim in PostgreSQL: a duplicate or early message claims
nothing and returns. The job's return value carries no business state.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, TypeVar

import psycopg
from rq import get_current_job

from pipeline import batches, dispatch, leases, pauses, runtime, storage, tasks
from pipeline.core.errors import BudgetReached, Busy, Cancelled, LeaseLost, Refused, Transient
from pipeline.core.records import Asset, Task
from pipeline.executor import Settlement, batched
from pipeline.log import log
from pipeline.settings import Settings

T = TypeVar("T")


class AttemptContext:
    """One attempt of one task: who makes it (the worker, the task, its lease token) and its lease,
    kept alive while the work runs by the process's heartbeat thread (`runtime.Heartbeats`).
    `check()` says, right before a paid call, whether the attempt may go on."""

    def __init__(self, rt: runtime.Runtime, task: Task, settlement: Settlement | None = None) -> None:
        self.rt, self.task = rt, task
        self.settlement = settlement or Settlement(task)
        self.worker = rt.worker_id
        self.lost = self.cancel_requested = self._told = False
        self._lock = threading.Lock()

    def __enter__(self) -> "AttemptContext":
        self.rt.heartbeats.watch(self, self.rt.settings.heartbeat_seconds)
        return self

    def __exit__(self, *exc) -> None:
        self.rt.heartbeats.forget(self)

    def beat(self) -> bool:
        """Extend the lease; False when PostgreSQL could not be asked."""
        with self._lock:
            try:
                result = leases.heartbeat(self.rt.conn("lease"), self.task, self.rt.settings.lease_seconds)
            except psycopg.OperationalError as exc:
                self.rt.drop("lease")
                log("heartbeat_failed", task_id=self.task.id, attempt=self.task.attempts,
                    lease_token=self.task.lease_token, error=exc.__class__.__name__)
                return False
        self.lost = self.lost or not result.alive
        self.cancel_requested = result.cancel_requested
        return True

    def tick(self) -> None:
        """One heartbeat. Beats go on after the lease is lost: a call in flight keeps its input held until it ends."""
        self.beat()
        if self.lost and not self._told:
            log("lease_lost", task_id=self.task.id, attempt=self.task.attempts, lease_token=self.task.lease_token)
            self._told = True

    def look(self) -> bool:
        """Read the lease (no write); renew it only when it is no fresher than a heartbeat would leave it.
        False when PostgreSQL could not be asked."""
        with self._lock:
            try:
                seen = leases.look(self.rt.conn("lease"), self.task)
            except psycopg.OperationalError as exc:
                self.rt.drop("lease")
                log("lease_check_failed", task_id=self.task.id, lease_token=self.task.lease_token,
                    error=exc.__class__.__name__)
                return False
        cfg = self.rt.settings
        if seen.alive and seen.seconds_left < cfg.lease_seconds - cfg.heartbeat_seconds:
            return self.beat()
        self.lost = self.lost or not seen.alive
        self.cancel_requested = seen.cancel_requested
        return True

    def check(self) -> None:
        """Raise Transient (the lease cannot be confirmed), LeaseLost or Cancelled when the attempt must stop."""
        if not self.look():
            raise Transient(f"task {self.task.id}: cannot confirm the lease; not calling the provider")
        if self.lost:
            raise LeaseLost(f"task {self.task.id}: lease {self.task.lease_token} is no longer held")
        if self.cancel_requested:
            raise Cancelled(f"task {self.task.id}: its version was cancelled")


def job_timeout(settings: Settings) -> int:
    """RQ's limit on one job: twice the attempt ceiling, at most a minute more than it."""
    ceiling = settings.attempt_ceiling_seconds
    return math.ceil(ceiling + min(ceiling, 60.0))


RECONNECT_SECONDS = 30.0   # how long a write waits for PostgreSQL to come back after its connection broke


def _written(rt: runtime.Runtime, write: Callable[[psycopg.Connection], T]) -> T:
    """`write` on the kept connection; when PostgreSQL restarted under it, again on a new one.

    A restart during a long provider call breaks the kept connection: the completion then waits
    (up to RECONNECT_SECONDS) for a new one instead of leaving the task to the lease's expiry
    and the next reconcile run. Every write here is fenced, so doing it again is safe.
    """
    deadline = time.monotonic() + RECONNECT_SECONDS
    while True:
        try:
            return write(rt.conn())
        except psycopg.OperationalError:
            rt.drop()
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.5)


@dataclass
class Claimed:
    """What the claim's transaction found and took: the task, the asset its input already has, whether it
    holds the input's one paid call, and the executor's refusal to prepare the call (Busy, BudgetReached)."""

    task: Task
    reusable: Asset | None = None
    holds_input: bool = False
    settlement: Settlement | None = None
    refused: Exception | None = None


def _claim_once(rt: runtime.Runtime, task_id: int, job_id: str | None) -> Claimed | None:
    conn, cfg = rt.conn(), rt.settings
    with conn.pipeline(), conn.transaction():   # BEGIN goes with the claim, COMMIT with the last statement
        found = leases.claim_and_take(conn, task_id, worker=rt.worker_id, lease_seconds=cfg.lease_seconds,
                                     rq_job_id=job_id, attempt_seconds=cfg.attempt_ceiling_seconds,
                                     receipt_store=rt.receipt_store)
        if found is None:
            return None
        task, reusable, holds_input, refusal = found
        claimed = Claimed(task, reusable, holds_input, settlement=Settlement(task))
        if refusal is not None and reusable is None:   # the same prompt was refused: not sent again unasked
            claimed.refused = Refused(f"the provider refused this same prompt before (task {refusal['task_id']}): "
                                      f"{refusal['message']}; edit the block, or retry the task to send it again")
            return claimed
        if claimed.reusable is not None or not claimed.holds_input:   # a bundle holds no input
            return claimed
        prepare = getattr(rt.executor, "prepare", None)
        if prepare is not None:
            try:
                prepare(conn, claimed.task, claimed.settlement)
            except (Busy, BudgetReached) as exc:   # nothing was taken; the claim stands and fails below
                claimed.refused = exc
        return claimed


def _claim(rt: runtime.Runtime, task_id: int, job_id: str | None) -> Claimed | None:
    return _written(rt, lambda conn: _claim_once(rt, task_id, job_id))


def _reuse(rt: runtime.Runtime, task: Task, asset: Asset | None = None) -> tuple[str, list[int]] | None:
    asset = asset or tasks.find_reusable(rt.conn(), task.fingerprint)
    if asset is None:
        return None
    provider = getattr(rt.executor, "provider_name", lambda kind: kind)(task.kind)
    status, unblocked = tasks.succeed(rt.conn(), task, asset, actor=rt.worker_id, reason="reused",
                                      details={"reused_sha256": asset.sha256}, reused_from=provider)
    return status.value, unblocked


def _hold_input(rt: runtime.Runtime, task: Task) -> tuple[str, list[int]] | None:
    """Become the one task that pays for this input, or reuse what its holder made, or wait for it.

    None: this task holds the input and may call. Otherwise the task's status after reusing or parking.
    """
    for _ in range(3):  # the holder may finish between our steps; each loop sees a newer state
        parked = tasks.wait_for_input(rt.conn(), task, rt.settings, actor=rt.worker_id,
                                      now=datetime.now(timezone.utc))
        if parked is not None:
            return parked.to.value, []
        reused = _reuse(rt, task)
        if reused:
            return reused
        if tasks.take_input(rt.conn(), task, rt.settings.lease_seconds):
            return _reuse(rt, task)   # the asset may have been stored just before we took the input
    raise Transient(f"task {task.id}: the hold on its input kept changing hands; trying again later")


def _attempt(rt: runtime.Runtime, claimed: Claimed, attempt: AttemptContext) -> tuple[str, list[int]]:
    task, settlement = claimed.task, attempt.settlement
    if claimed.reusable is not None:
        return _reuse(rt, task, claimed.reusable)
    try:
        if claimed.refused is not None:
            raise claimed.refused
        settled = _hold_input(rt, task) if task.kind != "bundle" and not claimed.holds_input else None
        if settled:
            return settled
        if batched(rt.settings, task):   # no call now: the line goes into a Batch API job (pipeline.batches)
            return _enlist(rt, task, attempt)
        asset = rt.executor.execute(task, attempt)   # it checks the attempt right before any paid call
    except Cancelled:
        tasks.cancel_running(rt.conn(), task, actor=rt.worker_id, also=settlement)
        return "cancelled", []
    except LeaseLost:
        tasks.release_input(rt.conn(), task)     # raised before any call: nothing is in flight
        raise
    except Exception as exc:  # noqa: BLE001 - every other error is classified by the retry policy
        outcome = _written(rt, lambda conn: tasks.fail_attempt(conn, task, exc, rt.settings, actor=rt.worker_id,
                                                                now=datetime.now(timezone.utc), also=settlement))
        log("attempt_failed", task_id=task.id, attempt=task.attempts, lease_token=task.lease_token,
            error=exc.__class__.__name__, status=outcome.to.value)
        return outcome.to.value, []
    status, unblocked = _written(rt, lambda conn: tasks.succeed(conn, task, asset, actor=rt.worker_id,
                                                                 also=settlement))
    return status.value, unblocked


def _enlist(rt: runtime.Runtime, task: Task, attempt: AttemptContext) -> tuple[str, list[int]]:
    settlement = attempt.settlement
    if not settlement.prepared:   # the input was taken after the claim: book the line now
        conn = rt.conn()
        with conn.transaction():
            rt.executor.prepare(conn, task, settlement)
    attempt.check()
    if not batches.enlist(rt.conn(), rt.settings, storage.receipt_book(rt.settings), task, settlement):
        raise LeaseLost(f"task {task.id}: lease {task.lease_token} was lost before its line was enlisted")
    return "batched", []


def run_task(task_id: int) -> str:
    rt = runtime.current()
    job = get_current_job()
    job_id = job.id if job else None
    claimed = _claim(rt, task_id, job_id)
    if claimed is None:
        if pauses.hold_if_paused(rt.conn(), task_id):   # sent again when the lane resumes
            log("job_skipped", task_id=task_id, rq_job_id=job_id, reason="lane paused")
            return "held"
        failed = tasks.fail_past_deadline(rt.conn(), [task_id], actor=rt.worker_id, by="worker",
                                          last_error=tasks.DEADLINE_BEFORE_CLAIM)
        log("job_skipped", task_id=task_id, rq_job_id=job_id, reason="deadline passed" if failed else "not runnable")
        return "failed" if failed else "skipped"
    task = claimed.task
    fields = {"task_id": task.id, "content_id": task.content_id, "version": task.version, "kind": task.kind,
              "attempt": task.attempts, "lease_token": task.lease_token, "rq_job_id": job_id}
    log("job_start", **fields)
    try:
        with AttemptContext(rt, task, claimed.settlement) as attempt:
            status, unblocked = _attempt(rt, claimed, attempt)
    except LeaseLost as exc:
        log("lease_lost_nothing_written", **fields, error=str(exc))
        return "lease_lost"
    finally:   # an outcome that did not commit leaves the slot and the ledger row to be written alone
        claimed.settlement.settle_alone(rt.conn)
    # the tasks this one unblocked, and those its freed call slot woke, go to their queues now
    dispatch.send_now(rt.conn(), rt.redis, unblocked + claimed.settlement.woken,
                      claim_seconds=rt.settings.dispatch_claim_seconds)
    log("job_end", **fields, status=status)
    return status
