"""One attempt of one task, from its claim to its written outcome.

The attempt reads top to bottom here (docs/architecture.md, "An attempt"): `claim` takes the task under a
new lease in one statement (`attempt_claim`), with the hold on its input's one paid call and, when its call
needs no booking, its call slot, then what its call still needs (`slots.take`, given the kind's `slots.CallPlan`
that the runtime resolved once); the attempt then reuses the asset its input already has, or parks behind the
task that holds the input, or takes what its call needs once it holds the input (`slots.take`), checks its lease
and hands the work to the process's executor (`pipeline.executor`), which answers the asset and what the call owes;
`_succeed` writes a success with what the call owes in one statement (`tasks.succeed_in`, `attempt_succeed`),
`_finish` any other outcome (`pipeline.tasks`) with what the call owes (`slots.settle`) in one transaction. An
`Attempt` carries all of it: the task and its lease, its kind's call plan, what the claim found, the call it took
and what that call owes. The RQ message that brings task ids, and runs an attempt of each, is `pipeline.message`;
a success claims the message's next task in its own transaction (`Following`).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable, Protocol, TypeVar

import psycopg

from pipeline import batches, db, runtime, slots, storage, tasks, tracing
from pipeline.core import policy
from pipeline.core.errors import Busy, Cancelled, LeaseLost, Refused, Transient
from pipeline.core.records import Asset, Task
from pipeline.core.states import TaskStatus, check_transition
from pipeline.log import log
from pipeline.settings import Settings

T = TypeVar("T")
RECONNECT_SECONDS = 30.0   # how long a write waits for PostgreSQL to come back after its connection broke


@dataclass(frozen=True)
class Lease:
    alive: bool                 # False: the lease is gone (superseded, expired and taken, cancelled)
    cancel_requested: bool
    seconds_left: float | None = None   # the lease's time left, when only looked at


class Following(Protocol):
    """What a success asks of the message its attempt came in (`pipeline.message.Message`): the task to claim in
    the success's own transaction, if one is to run here next, and where its claim goes."""

    job_id: str | None
    claimed: dict[int, "Attempt | None"]

    def next_task(self) -> int | None: ...


class Attempt:
    """One attempt of one task: the task under its lease, what its kind's call needs (`plan`), what the claim found
    (the asset its input already has, whether it holds the input's one paid call, why the call may not be made
    now), the call it took and what that call owes (its ledger row; whether the attempt's error proves it unpaid).

    While the work runs, the process's heartbeat thread (`runtime.Heartbeats`) renews the lease; `check()` says,
    right before a paid call, whether the attempt may go on."""

    def __init__(self, rt: runtime.Runtime, task: Task, plan: slots.CallPlan, *, reusable: Asset | None = None,
                 holds_input: bool = False, refused: Exception | None = None) -> None:
        self.rt, self.task, self.plan = rt, task, plan   # plan: a paid call or local work, a held input, its slots
        self.reusable, self.holds_input, self.refused = reusable, holds_input, refused
        self.call: slots.Call | None = None      # what the call took; None until taken
        self.ledger: dict | None = None          # the call's ledger row, once the executor answered it
        self.unpaid = False                      # the attempt ended in an error that proves the call cost nothing
        self.settled = False                     # what the call owes was written
        self._wake: psycopg.Cursor | None = None   # the wake of the slot waiters its release lets run
        self.woken_ids: list[int] = []             # or their outbox rows, when the success freed the slot
        self.lost = self.cancel_requested = self._told = False
        self.message: Following | None = None    # the RQ message it came in, when a worker runs it
        self.traceparent: str | None = None      # its version's save's trace, read with the claim when traced
        self.claimed_ns: tuple[int | None, int | None] = (None, None)   # when its claim began and ended, if traced
        self._lock = threading.Lock()

    def __enter__(self) -> "Attempt":
        self.rt.heartbeats.watch(self, self.rt.settings.heartbeat_seconds)
        return self

    def __exit__(self, *exc) -> None:
        self.rt.heartbeats.forget(self)

    # the lease

    def beat(self) -> bool:
        """Extend the lease, and the hold on the task's input while its call runs (even once the lease is lost: a
        call already made stays the only one for its input until its result is stored). False when PostgreSQL
        could not be asked."""
        with self._lock:
            try:
                conn = self.rt.conn("lease")
                with conn.transaction():
                    row = db.one(conn, "tasks_heartbeat", {"task_id": self.task.id,
                                                           "lease_token": self.task.lease_token,
                                                           "lease_seconds": self.rt.settings.lease_seconds})
                    if self.plan.shared:
                        db.execute(conn, "input_calls_renew", {"fingerprint": self.task.fingerprint,
                                                               "lease_token": self.task.lease_token,
                                                               "hold_seconds": self.rt.settings.lease_seconds})
            except psycopg.OperationalError as exc:
                self._unreachable("heartbeat_failed", exc)
                return False
        self.lost = self.lost or row is None
        self.cancel_requested = bool(row and row["cancel_requested"])
        return True

    def tick(self) -> None:
        """One heartbeat. Beats go on after the lease is lost: a call in flight keeps its input held until it ends."""
        self.beat()
        if self.lost and not self._told:
            log("lease_lost", task_id=self.task.id, attempt=self.task.attempts, lease_token=self.task.lease_token)
            self._told = True

    def look(self) -> Lease | None:
        """The lease as it stands, read only (None: PostgreSQL could not be asked)."""
        with self._lock:
            try:
                row = db.one(self.rt.conn("lease"), "tasks_lease_look", {"task_id": self.task.id,
                                                                         "lease_token": self.task.lease_token})
            except psycopg.OperationalError as exc:
                self._unreachable("lease_check_failed", exc)
                return None
        return Lease(alive=row is not None, cancel_requested=bool(row and row["cancel_requested"]),
                     seconds_left=row["seconds_left"] if row else None)

    def check(self) -> None:
        """Raise Transient (the lease cannot be confirmed), LeaseLost or Cancelled when the attempt must stop.
        A read of the lease, renewed only when it is no fresher than a heartbeat would leave it."""
        seen, cfg = self.look(), self.rt.settings
        confirmed = seen is not None
        if seen is not None and seen.alive and seen.seconds_left < cfg.lease_seconds - cfg.heartbeat_seconds:
            confirmed = self.beat()
        elif seen is not None:
            self.lost = self.lost or not seen.alive
            self.cancel_requested = seen.cancel_requested
        if not confirmed:
            raise Transient(f"task {self.task.id}: cannot confirm the lease; not calling the provider")
        if self.lost:
            raise LeaseLost(f"task {self.task.id}: lease {self.task.lease_token} is no longer held")
        if self.cancel_requested:
            raise Cancelled(f"task {self.task.id}: its version was cancelled")

    def _unreachable(self, event: str, exc: Exception) -> None:
        self.rt.drop("lease")
        log(event, task_id=self.task.id, attempt=self.task.attempts, lease_token=self.task.lease_token,
            error=exc.__class__.__name__)

    # the call

    def settle_in(self, conn: psycopg.Connection) -> None:
        """What the call owes, in the transaction that writes the attempt's outcome."""
        if self.call is not None:
            self._wake = slots.settle(conn, self.task, self.call, self.ledger, unpaid=self.unpaid)

    def woken(self) -> list[int]:
        """The outbox rows of the slot waiters its release woke; read once the settling transaction ended."""
        return self.woken_ids + ([] if self._wake is None else [row["outbox_id"] for row in self._wake.fetchall()])

    def settle_alone(self) -> None:
        """After an outcome that did not commit (a lost lease, a database error): settle on our own."""
        if self.settled or self.call is None or not self.call.owes(self.ledger, self.unpaid):
            return
        try:
            conn = self.rt.conn()
            with conn.transaction():
                self.settle_in(conn)
            self.settled = True
        except psycopg.Error as exc:   # the slot frees itself at held_until; the receipts keep the call
            log("settlement_failed", task_id=self.task.id, error=exc.__class__.__name__,
                ledger=self.ledger is not None)


def job_timeout(settings: Settings) -> int:
    """RQ's limit on one job: twice the attempt ceiling, at most a minute more than it."""
    ceiling = settings.attempt_ceiling_seconds
    return math.ceil(ceiling + min(ceiling, 60.0))


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


def claim(rt: runtime.Runtime, task_id: int, job_id: str | None = None) -> Attempt | None:
    """Take the task for one attempt, or None when it is not runnable now (nothing is changed then): workers,
    tests and benchmarks all claim so."""
    def once(conn: psycopg.Connection) -> Attempt | None:
        # Its COMMIT goes only once the answer is read (not a lone autocommit statement, which commits even when
        # its client died while it waited): a worker that dies while its claim waits leaves nothing claimed. Not
        # in pipeline mode, which costs psycopg twice the CPU of the extra round trip for BEGIN
        # (docs/performance.md).
        with conn.transaction():
            return _claim_in(rt, conn, task_id, job_id)
    return _written(rt, once)


# The claim's moves are constants: checked once, at import (`tasks_claim` moves a ready or retry task to running).
check_transition(TaskStatus.READY, TaskStatus.RUNNING, "worker")
check_transition(TaskStatus.RETRY, TaskStatus.RUNNING, "worker")


def _claim_in(rt: runtime.Runtime, conn: psycopg.Connection, task_id: int, job_id: str | None) -> Attempt | None:
    """The claim as one statement (`attempt_claim`), in the caller's transaction: the move to `running` under a new
    lease, the hold on the input's one paid call, the input's stored asset and the provider's earlier refusal of it
    and, for a task that holds its input when its call needs no booking (`CallPlan.in_claim`), its call slot and
    rate token; then, for a task that holds its input, what its call needs (`slots.take`: read from the claim's row,
    or the slot, rate token and booking taken in the same transaction)."""
    cfg, calls, token, started = rt.settings, rt.calls, uuid.uuid4(), tracing.now_ns()
    row = db.one(conn, "tasks_claim", {
        "task_id": task_id, "lease_token": token, "worker": rt.worker_id, "lease_seconds": cfg.lease_seconds,
        "rq_job_id": job_id, "attempt_seconds": cfg.attempt_ceiling_seconds, "receipt_store": rt.receipt_store,
        "calls": calls.in_claim, "traced": tracing.on()})
    if row is None:
        return None
    task = Task.from_row(row)
    stored = None if row["stored_sha256"] is None else Asset(
        row["stored_sha256"], row["stored_media_type"], row["stored_size"], row["stored_width"],
        row["stored_height"], row["stored_duration_ms"])
    attempt = Attempt(rt, task, calls.of[task.kind], reusable=stored, holds_input=row["holder"] == task.id)
    attempt.traceparent, attempt.claimed_ns = row["traceparent"], (started, tracing.now_ns())
    if row["refused_by"] is not None and stored is None:   # the same prompt was refused: not sent again unasked
        attempt.refused = Refused(f"the provider refused this same prompt before (task {row['refused_by']}): "
                                  f"{row['refused_message']}; edit the block, or retry the task to send it again")
    elif stored is None and attempt.holds_input and attempt.plan.paid:   # local work takes no call
        try:
            attempt.call = slots.take(conn, cfg, attempt.plan, task, claimed=row)
        except Busy as exc:   # nothing was taken (SlotsBusy and BudgetReached are Busy); the claim stands
            attempt.refused = exc
    return attempt


def _finish(rt: runtime.Runtime, attempt: Attempt, write: Callable[[psycopg.Connection], T]) -> T:
    """Write the attempt's outcome (`write`, a function of `pipeline.tasks` in the caller's transaction) and what
    its call owes, in one transaction; again on a new connection when PostgreSQL restarted."""
    def once(conn: psycopg.Connection) -> T:
        with conn.pipeline(), conn.transaction():
            result = write(conn)
            attempt.settle_in(conn)
        attempt.settled = True
        return result
    with tracing.span("complete", attributes={"task.id": attempt.task.id}):
        return _written(rt, once)


def _succeed(rt: runtime.Runtime, attempt: Attempt, asset: Asset, **how) -> tuple[str, list[int]]:
    """Complete the task with its asset and what its call owes (`tasks.succeed_in`) in one transaction, whose
    COMMIT is sent once the answer is read (as the claim's); LeaseLost once that is written, when the lease was
    lost meanwhile. The next task of the message, if it is to run here, is claimed in the same transaction: one
    commit, and one wait for its WAL flush, less per task."""
    message = attempt.message
    following = message.next_task() if message else None

    def once(conn: psycopg.Connection) -> tasks.Success:
        with conn.transaction():
            done = tasks.succeed_in(conn, attempt.task, asset, actor=rt.worker_id, call=attempt.call,
                                    ledger=attempt.ledger, **how)
            if following is not None:
                message.claimed[following] = _claim_in(rt, conn, following, message.job_id)
        return done

    with tracing.span("complete", attributes={"task.id": attempt.task.id, "task.status": "succeeded"}):
        done = _written(rt, once)
    attempt.settled = True   # the paid result, its ledger row and its slot were written, lease or not
    attempt.woken_ids = done.woken
    if done.lost is not None:
        raise done.lost
    return done.status.value, done.unblocked


def _reuse(rt: runtime.Runtime, attempt: Attempt, asset: Asset | None = None) -> tuple[str, list[int]] | None:
    asset = asset or tasks.find_reusable(rt.conn(), attempt.task.fingerprint)
    if asset is None:
        return None
    return _succeed(rt, attempt, asset, reason="reused", details={"reused_sha256": asset.sha256},
                    reused_from=attempt.plan.provider)


def _hold_input(rt: runtime.Runtime, attempt: Attempt) -> tuple[str, list[int]] | None:
    """Become the one task that pays for this input, or reuse what its holder made, or wait for it.

    None: this task holds the input and may call. Otherwise the task's status after reusing or parking.
    """
    task = attempt.task
    for _ in range(3):  # the holder may finish between our steps; each loop sees a newer state
        parked = tasks.wait_for_input(rt.conn(), task, rt.settings, actor=rt.worker_id,
                                      now=datetime.now(timezone.utc))
        if parked is not None:
            return parked.to.value, []
        reused = _reuse(rt, attempt)
        if reused:
            return reused
        if tasks.take_input(rt.conn(), task, rt.settings.lease_seconds):
            return _reuse(rt, attempt)   # the asset may have been stored just before we took the input
    raise Transient(f"task {task.id}: the hold on its input kept changing hands; trying again later")


def _call(rt: runtime.Runtime, attempt: Attempt) -> Asset | None:
    """Take what the call needs if the claim did not (the input was taken after it), check the lease right before
    paying, and have the executor do the work: the asset, or None when the call went into a Batch API job instead.
    What the call owes is the executor's answer (its ledger row), kept before its error is raised; the call's
    booking is given back when the error proves it unpaid."""
    task, plan = attempt.task, attempt.plan
    if not plan.paid:   # local work: no call, nothing to take
        return rt.executor.execute(task, plan, None).asset
    if attempt.call is None:
        try:
            conn = rt.conn()
            with conn.transaction():
                attempt.call = slots.take(conn, rt.settings, plan, task)
        except psycopg.Error as exc:
            raise Transient(f"could not prepare the call: {exc.__class__.__name__}") from exc
    try:
        attempt.check()
        if attempt.call.batch:   # no call now: the line goes into a Batch API job, which owns its booking
            enlisted = batches.enlist(rt.conn(), rt.settings, storage.receipt_book(rt.settings), task,
                                      attempt.call.booking)
            attempt.call = None   # the line owns the booking now (or it was given back)
            if not enlisted:
                raise LeaseLost(f"task {task.id}: lease {task.lease_token} was lost before its line was enlisted")
            return None
        called = rt.executor.execute(task, plan, attempt.call)
        attempt.ledger = called.ledger
        if called.error is not None:
            raise called.error
        return called.asset
    except Exception as exc:
        attempt.unpaid = policy.unpaid(exc)
        raise


def run(rt: runtime.Runtime, attempt: Attempt) -> tuple[str, list[int]]:
    """The claimed attempt's work, and its outcome written: its status and the tasks its success unblocked."""
    task = attempt.task
    if attempt.reusable is not None:
        return _reuse(rt, attempt, attempt.reusable)
    try:
        if attempt.refused is not None:
            raise attempt.refused
        settled = (_hold_input(rt, attempt) if attempt.plan.shared and not attempt.holds_input
                   else None)
        if settled:
            return settled
        asset = _call(rt, attempt)
        if asset is None:
            return "batched", []
    except Cancelled:
        _finish(rt, attempt, lambda conn: tasks.cancel_running_in(conn, task, actor=rt.worker_id))
        return "cancelled", []
    except LeaseLost:
        tasks.release_input(rt.conn(), task)     # raised before any call: nothing is in flight
        raise
    except Exception as exc:  # noqa: BLE001 - every other error is classified by the retry policy
        outcome = _finish(rt, attempt, lambda conn: tasks.fail_attempt_in(
            conn, task, exc, rt.settings, actor=rt.worker_id, now=datetime.now(timezone.utc)))
        log("attempt_failed", task_id=task.id, attempt=task.attempts, lease_token=task.lease_token,
            error=exc.__class__.__name__, status=outcome.to.value)
        return outcome.to.value, []
    return _succeed(rt, attempt, asset)
