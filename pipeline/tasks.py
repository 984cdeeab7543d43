"""Every change of a task's status after its claim, each one function here and one query in tasks.sql.

`apply` is the one place a decision (`pipeline.core.outcome.Outcome`) is written, for a
worker's failure or cancel and for the reconciler alike: the task row by one guarded UPDATE
(`tasks_move`), the asset and its input, the input hold, the dependents it unblocks, the
retry's outbox row, the dead letter, and the event. A worker's success, the hot path, is
`succeed_in`: the same writes, with the call's ledger row and slot, in one statement
(`tasks_succeed`, the function `attempt_succeed`). A worker's exit is fenced by its lease
token: zero rows means it no longer holds the lease, and it raises `LeaseLost` having
written nothing but a paid result. The other moves are set-based and each has its function:
the deadline, superseding, and an editor's cancel, reopen and resolve (whose rules
`pipeline.review` and `pipeline.versions` check). Every function checks its moves against the
transition table (`core.states.TRANSITIONS`) before it writes (`succeed_in`'s, a constant, once at
import). Besides, the hold on an input's one paid call. The claim and the lease it issues are `pipeline.attempt`. Each function is one
short transaction, or runs in its caller's; none is open while the work itself runs.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import datetime

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db, events, slots, spend
from pipeline.core import outcome as decide
from pipeline.core import policy
from pipeline.core.errors import LeaseLost, WaitingForInput
from pipeline.core.outcome import Outcome
from pipeline.core.records import Asset, Task, clip
from pipeline.core import kinds
from pipeline.core.states import UNFINISHED, TaskStatus, check_transition
from pipeline.settings import Settings

S = TaskStatus
DEADLINE_BEFORE_CLAIM = "deadline passed before the task could run"


def _may(froms: frozenset[TaskStatus] | tuple[TaskStatus, ...], to: TaskStatus, by: str) -> None:
    """StaleTransition unless `by` may move a task from each of `froms` to `to` (a set-based move's rule)."""
    for status in froms:
        check_transition(status, to, by)


_may((S.RUNNING,), S.SUCCEEDED, "worker")   # `succeed_in`'s move is a constant: checked once, at import


def fail_past_deadline(conn: psycopg.Connection, task_ids: list[int], *, actor: str, by: str,
                       last_error: str = "deadline passed") -> list[int]:
    """Fail those of these waiting tasks whose deadline passed, each with a dead letter; the ids that failed.

    `by`: "worker" (its claim found the task past its deadline) or "reconciler".
    """
    _may((S.READY, S.RETRY), S.FAILED, by)
    with conn.transaction():
        rows = db.all(conn, "tasks_fail_past_deadline", {"ids": task_ids, "actor": actor, "last_error": last_error})
    return [row["id"] for row in rows]


def supersede_older(conn: psycopg.Connection, content_id: int, version: int, *, actor: str, by: str,
                    reason: str) -> list[int]:
    """Every unfinished task of the content's versions before `version` becomes superseded (in the caller's
    transaction); a running one loses its lease, so its worker's fenced exit matches nothing.

    `by`: "save" (a new version) or "reconciler" (its sweep).
    """
    _may(UNFINISHED, S.SUPERSEDED, by)
    rows = db.all(conn, "tasks_supersede_older", {"content_id": content_id, "version": version, "actor": actor,
                                                  "reason": reason})
    return [row["task_id"] for row in rows]


def cancel_waiting(conn: psycopg.Connection, content_id: int, version: int, *, actor: str) -> list[int]:
    """An editor cancelled the version: its waiting tasks (ready, retry, unknown) are cancelled now, their unsent
    messages dropped (in the caller's transaction); a running one is cancelled by its worker or lease expiry."""
    _may((S.READY, S.RETRY, S.UNKNOWN), S.CANCELLED, "editor")
    rows = db.all(conn, "tasks_cancel_waiting", {"content_id": content_id, "version": version, "actor": actor})
    return [row["task_id"] for row in rows]


def reopen(conn: psycopg.Connection, task_id: int, from_status: str, *, budget: int,
           deadline_seconds: float) -> dict | None:
    """An editor sends a failed or unknown task of the current, uncancelled version back to `ready`, with `budget`
    more attempts and a deadline at least `deadline_seconds` away (in the caller's transaction, which writes the
    event); None when the task is no longer as the editor saw it."""
    check_transition(from_status, S.READY, "editor")
    return db.one(conn, "tasks_manual_retry", {"task_id": task_id, "from_status": from_status, "budget": budget,
                                               "deadline_seconds": deadline_seconds})


def rerun(conn: psycopg.Connection, task_id: int, *, budget: int, deadline_at: datetime) -> dict | None:
    """An editor reruns a dead-lettered task of the current, uncancelled version: `ready` again with `budget` more
    attempts and the deadline `pipeline.core.rerun` decided (in the caller's transaction, which keeps the dead
    letter and records the rerun); None when the task is no longer failed."""
    check_transition(S.FAILED, S.READY, "editor")
    return db.one(conn, "tasks_rerun", {"task_id": task_id, "budget": budget, "deadline_at": deadline_at})


def resolve_failed(conn: psycopg.Connection, task_id: int, last_error: str) -> dict | None:
    """An editor closes an `unknown` task as failed, with a dead letter (in the caller's transaction, which writes
    the event); None when the task is no longer unknown."""
    check_transition(S.UNKNOWN, S.FAILED, "editor")
    return db.one(conn, "tasks_resolve_failed", {"task_id": task_id, "last_error": clip(last_error)})


def take_input(conn: psycopg.Connection, task: Task, hold_seconds: float) -> bool:
    """Hold the right to make the one paid call for this task's input; False when another task holds it, when
    the input already has a stored asset, or when the task's lease is no longer ours."""
    with conn.transaction():
        row = db.one(conn, "input_calls_take", {"task_id": task.id, "lease_token": task.lease_token,
                                                "hold_seconds": hold_seconds})
    return row is not None and row["task_id"] == task.id


def wait_for_input(conn: psycopg.Connection, task: Task, cfg: Settings, *, actor: str,
                   now: datetime) -> Outcome | None:
    """Park the task until the holder of its input is done, spending no attempt; None if nobody holds it now.

    The hold is locked while we park, so its release comes after and wakes us: its wake is a statement of its own,
    whose snapshot sees our committed park (`input_calls_release`, migration 0025).
    """
    with conn.transaction():
        holder = db.one(conn, "input_calls_holder", {"fingerprint": task.fingerprint})
        if holder is None or holder["task_id"] == task.id:
            return None
        wait = policy.input_wait_seconds(holder["held_until"], now=now, lease_seconds=cfg.lease_seconds)
        error = WaitingForInput(f"task {holder['task_id']} ({holder['holder_status']}) is making the same input",
                                retry_after=wait)
        return fail_attempt_in(conn, task, error, cfg, actor=actor, now=now)


def release_input(conn: psycopg.Connection, task: Task) -> None:
    """Give up the hold on the task's input (nothing is in flight) and wake the tasks waiting for it."""
    if not kinds.get(task.kind).shared:
        return
    with conn.transaction():
        _release_input_in(conn, task)


def _release_input_in(conn: psycopg.Connection, task: Task) -> None:
    """`release_input` in the caller's transaction (a savepoint would cost a transaction id of its own)."""
    if kinds.get(task.kind).shared:
        db.execute(conn, "input_calls_release", {"fingerprint": task.fingerprint, "lease_token": task.lease_token})


@dataclass(frozen=True)
class Seen:
    """A task as the one moving it saw it; a move matches only while the task is still so.

    `by` is the mover's role in the transition table: a "worker" holds the task's current lease
    (its call, if any, is over when it moves the task); the "reconciler" saw the lease run out,
    or the task `unknown`, and cannot know whether a call is still in flight.
    """

    task: Task | None
    task_id: int
    status: TaskStatus
    lease_token: uuid.UUID | str | None
    fingerprint: str
    kind: str
    by: str

    @classmethod
    def held(cls, task: Task) -> "Seen":
        """The task a worker claimed and still holds."""
        return cls(task, task.id, TaskStatus.RUNNING, task.lease_token, task.fingerprint, task.kind, "worker")

    @classmethod
    def found(cls, row: dict) -> "Seen":
        """A task row the reconciler read (the lease of a running one expired)."""
        token = str(row["lease_token"]) if row["lease_token"] else None
        return cls(None, row["id"], TaskStatus(row["status"]), token, row["fingerprint"], row["kind"], "reconciler")


@dataclass(frozen=True)
class Applied:
    status: TaskStatus | None            # where the task went; None when it was not as its mover saw it
    row: dict | None = None
    queued: psycopg.Cursor | None = None   # a success's outbox_add_unblocked, sent with the COMMIT

    def unblocked(self) -> list[int]:
        """The outbox rows of dependents this success made runnable; read once the transaction ended."""
        return [] if self.queued is None else [row["id"] for row in self.queued.fetchall()]


def apply(conn: psycopg.Connection, seen: Seen, outcome: Outcome, *, actor: str) -> Applied:
    """Write one decision about a task, inside the caller's transaction: every exit from `running` but a
    worker's success (`succeed_in`), and the reconciler's moves of an `unknown` one.

    A worker that lost its lease writes nothing (`LeaseLost`); if it was lost to a cancel, the task is cancelled.
    A reconciler's success indexes the recovered asset for its input whatever happens to its move.
    """
    check_transition(seen.status, outcome.to, seen.by)
    # the call is over; an unknown one keeps its input held
    releasing = (seen.by == "worker" and outcome.to is not TaskStatus.UNKNOWN
                 and kinds.get(seen.kind).shared)
    with conn.pipeline():   # up to the move, one round trip: nothing before it needs an answer
        # the task and every other task this writes, locked in id order (dependents are released exactly once)
        db.execute(conn, "tasks_lock_settling", {"task_id": seen.task_id, "input_waiters": releasing,
                                                 "dependents": outcome.to is TaskStatus.SUCCEEDED})
        if outcome.asset is not None:            # a paid result is kept whatever happens to the move
            db.execute(conn, "assets_upsert", outcome.asset.__dict__)
            db.execute(conn, "asset_inputs_upsert", {"fingerprint": seen.fingerprint,
                                                     "sha256": outcome.asset.sha256})
        if releasing:
            _release_input_in(conn, seen.task)
        row = _move(conn, seen, outcome, actor)
    if row is None:
        return _not_moved(conn, seen, outcome, actor)
    queued = None
    if outcome.to is TaskStatus.SUCCEEDED:   # nothing waits for its answer: it travels with the COMMIT
        queued = db.execute(conn, "outbox_add_unblocked", {"task_id": seen.task_id})
    if outcome.to is TaskStatus.RETRY:
        db.execute(conn, "outbox_add", {"task_id": seen.task_id, "lane": None,   # the version's lane
                                        "available_at": outcome.available_at})
    if outcome.code is decide.Reason.REFUSED and kinds.get(seen.kind).paid:
        db.execute(conn, "refused_inputs_add", {"fingerprint": seen.fingerprint, "task_id": seen.task_id,
                                                "message": clip(outcome.reason)})
    if outcome.dead_letter:
        db.execute(conn, "dead_letters_insert", {"task_id": seen.task_id, "reason": outcome.dead_letter,
                                                 "last_error": clip(outcome.reason), "attempts": row["attempts"]})
    return Applied(outcome.to, row, queued)


def _move(conn: psycopg.Connection, seen: Seen, outcome: Outcome, actor: str) -> dict | None:
    error = None if outcome.error is None else clip(outcome.error)
    return db.one(conn, "tasks_move", {
        "task_id": seen.task_id, "from_status": seen.status.value, "lease_token": seen.lease_token,
        "fence": seen.by, "to_status": outcome.to.value, "actor": actor, "event": outcome.event,
        "reason": outcome.reason, "asset_sha256": outcome.asset.sha256 if outcome.asset else None,
        "available_at": outcome.available_at, "refund": int(outcome.refund_attempt), "last_error": error,
        "last_error_code": outcome.code.value if error is not None else None, "waiting_for": outcome.waiting_for,
        "details": Jsonb({**(outcome.details or {}), "code": outcome.code.value})})   # the UI says the code in words


def _not_moved(conn: psycopg.Connection, seen: Seen, outcome: Outcome, actor: str) -> Applied:
    """The task was not as its mover saw it. The reconciler leaves it; a worker's lease was lost:
    to a cancel (then the task is cancelled now), or to someone else (LeaseLost)."""
    if seen.by != "worker":
        return Applied(None)
    if outcome.to is not TaskStatus.CANCELLED:
        row = _move(conn, seen, decide.cancelled(), actor)
        if row is not None:
            return Applied(TaskStatus.CANCELLED, row)
    current = db.one(conn, "tasks_get", {"task_id": seen.task_id})
    raise LeaseLost(f"task {seen.task_id}: lease {seen.lease_token} is no longer current "
                    f"(status {current['status']}); nothing was written")


@dataclass(frozen=True)
class Success:
    """What a worker's success wrote: where its task went (None: the lease was lost; its paid result was kept) and
    the outbox rows to send now, of the dependents it unblocked and of the slot waiters its freed slot woke."""

    status: TaskStatus | None
    unblocked: list[int]
    woken: list[int]
    lost: LeaseLost | None = None


def succeed_in(conn: psycopg.Connection, task: Task, asset: Asset, *, actor: str, call: slots.Call | None = None,
               ledger: dict | None = None, reason: str = "succeeded", details: dict | None = None,
               reused_from: str | None = None) -> Success:
    """Record the asset and complete the task, with what its `call` owes (its `ledger` row, its slot, its booking),
    in the caller's transaction (`attempt_succeed`, one statement, and the booking's settlement).

    The asset is indexed, the input released, the ledger row written and the slot freed even when the lease was
    lost meanwhile (a superseded task whose call was in flight): it was paid for, so newer work reuses it; the
    caller raises `Success.lost` after the commit. A cancel requested meanwhile cancels the task. `reused_from`: the
    provider whose earlier call made the asset; the `reused` event and ledger row are written with the completion.
    """
    row = db.one(conn, "tasks_succeed", {
        "task_id": task.id, "lease_token": task.lease_token, "actor": actor, "sha256": asset.sha256,
        "media_type": asset.media_type, "size": asset.size, "width": asset.width, "height": asset.height,
        "duration_ms": asset.duration_ms, "reason": reason, "details": Jsonb(details) if details else None,
        "ledger": None if ledger is None else Jsonb(dict(ledger, attempt=task.attempts)),
        "slots": call.slots if call else None, "slot": call.slot if call else None,
        "bulk_slots": call.bulk_slots if call else None})
    if call is not None and call.booking is not None:
        slots.settle_booking(conn, call.booking, ledger)
    if row["status"] == "lost":
        lost = LeaseLost(f"task {task.id}: lease {task.lease_token} is no longer current (status {row['current']}); "
                         "only its paid result was kept")
        return Success(None, [], row["woken"], lost)
    if row["status"] == S.SUCCEEDED.value and reused_from is not None:
        record_event(conn, task, "reused", actor=actor, reason="an identical input already produced this asset",
                     details={"sha256": asset.sha256})
        spend.record_reuse(conn, task, reused_from)
    return Success(TaskStatus(row["status"]), row["unblocked"], row["woken"])


def succeed(conn: psycopg.Connection, task: Task, asset: Asset, *, actor: str, call: slots.Call | None = None,
            **how) -> Success:
    """`succeed_in` in a transaction of its own, whose COMMIT is sent once the answer is read: a worker that dies
    while its success waits (on a lock, a slow server) commits nothing, and the reconciler decides from the
    receipts. Not in pipeline mode (see `attempt.claim`). LeaseLost after the commit when the lease was lost."""
    with conn.transaction():
        done = succeed_in(conn, task, asset, actor=actor, call=call, **how)
    if done.lost is not None:
        raise done.lost
    return done


def fail_attempt_in(conn: psycopg.Connection, task: Task, error: Exception, cfg: Settings, *, actor: str,
                    now: datetime, rng: random.Random | None = None) -> Outcome:
    """Apply the retry policy to an attempt that raised `error`, in the caller's transaction; what was decided
    (a cancel, if the version was cancelled meanwhile). LeaseLost, having written nothing, when the lease was lost."""
    outcome = policy.after_failure(error, attempts=task.attempts, max_attempts=task.max_attempts, now=now,
                                   deadline=task.deadline_at, base=cfg.backoff_base_seconds,
                                   cap=cfg.backoff_cap_seconds, rng=rng or random.Random())
    applied = apply(conn, Seen.held(task), outcome, actor=actor)
    return outcome if applied.status is outcome.to else decide.cancelled()


def fail_attempt(conn: psycopg.Connection, task: Task, error: Exception, cfg: Settings, *, actor: str,
                 now: datetime, rng: random.Random | None = None) -> Outcome:
    """`fail_attempt_in` in a transaction of its own."""
    with conn.pipeline(), conn.transaction():
        return fail_attempt_in(conn, task, error, cfg, actor=actor, now=now, rng=rng)


def cancel_running_in(conn: psycopg.Connection, task: Task, *, actor: str) -> None:
    """The worker stops: its version was cancelled (in the caller's transaction). LeaseLost, having written nothing,
    when the lease was lost."""
    apply(conn, Seen.held(task), decide.cancelled(), actor=actor)


def find_reusable(conn: psycopg.Connection, fingerprint: str) -> Asset | None:
    row = db.one(conn, "asset_inputs_find", {"fingerprint": fingerprint})
    return None if row is None else Asset.from_row(row)


def record_event(conn: psycopg.Connection, task: Task, action: str, *, actor: str, reason: str = "",
                 details: dict | None = None) -> None:
    events.record(conn, task_id=task.id, content_id=task.content_id, version=task.version, action=action,
                  actor=actor, attempt=task.attempts, lease_token=task.lease_token, reason=reason, details=details)
