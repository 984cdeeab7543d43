"""Rerunning a dead-lettered task: a new run that keeps the history of the run it repeats.

A rerun is an editor's decision about a `failed` task: its open dead letter stays and is
marked rerun (by whom, when, why), a row of `replays` records the new run (`replay_of`, the
dead letter; the attempt it starts at; the deadline before and after), and the task goes
back to `ready` through `pipeline.tasks.rerun`. The deadline moves only when the editor
asks (`extend_deadline_seconds`), decided in `pipeline.core.rerun`, and dependents still
waiting get the same deadline. Like a save, a rerun adds work, so it passes admission last:
over capacity, the transaction rolls back and nothing changes. This module knows nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import psycopg

from pipeline import db, events, tasks
from pipeline.core import rerun as rules
from pipeline.core.errors import Conflict, NotFound
from pipeline.core.principal import Principal
from pipeline.core.states import TaskStatus
from pipeline.review import ensure_runnable_version, readmit
from pipeline.settings import Settings

# what is stored keeps the name it had before the rerun had its own: this event's action and its details'
# replay_id and replay_of, the table replays, dead_letters.replayed_at, replayed_by and replay_why
ACTION = "dead_letter_replayed"


@dataclass(frozen=True)
class Rerun:
    rerun_id: int
    task_id: int
    rerun_of: int                       # the dead letter of the run this one repeats
    status: str
    first_attempt: int
    max_attempts: int
    deadline_before: datetime
    deadline_after: datetime
    outbox_ids: tuple[int, ...] = ()    # the caller may send these at once (fast path)


def _rerunnable(conn: psycopg.Connection, task_id: int) -> dict:
    """The task and its open dead letter, locked; Conflict naming why it cannot be rerun."""
    task = db.one(conn, "tasks_get_with_version", {"task_id": task_id})
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    if task["status"] != TaskStatus.FAILED.value:
        raise Conflict(f"task {task_id} is {task['status']}; only a failed task with a dead letter can be rerun",
                       code="invalid_transition", details={"status": task["status"]})
    ensure_runnable_version(task, "rerun")
    letter = db.one(conn, "dead_letters_open_lock", {"task_id": task_id})
    if letter is None:
        raise Conflict(f"task {task_id} has no open dead letter to rerun", code="no_dead_letter")
    return {**task, "letter": letter}


def rerun(conn: psycopg.Connection, task_id: int, cfg: Settings, *, by: Principal, why: str,
           extend_deadline_seconds: float | None = None, now: datetime | None = None) -> Rerun:
    """`by` reruns a dead-lettered task, its cost booked against `by`'s key; CapacityExceeded (nothing changed)
    when the system is full."""
    with conn.transaction():
        task = _rerunnable(conn, task_id)
        letter = task["letter"]
        deadline = rules.rerun_deadline(task["deadline_at"], now or datetime.now(timezone.utc),
                                         extend_deadline_seconds)
        row = tasks.rerun(conn, task_id, budget=cfg.max_attempts, deadline_at=deadline)
        if row is None or db.one(conn, "dead_letters_mark_replayed", {"id": letter["id"], "actor": by.owner,
                                                                      "why": why}) is None:
            raise Conflict(f"task {task_id} changed while it was being rerun; reload and try again", code="stale")
        record = db.one(conn, "replays_insert", {
            "task_id": task_id, "replay_of": letter["id"], "first_attempt": row["attempts"] + 1,
            "max_attempts": row["max_attempts"], "actor": by.owner, "why": why,
            "deadline_before": task["deadline_at"], "deadline_after": deadline})
        extended = []
        if deadline != task["deadline_at"]:
            extended = [r["id"] for r in db.all(conn, "tasks_extend_waiting_dependents",
                                                {"task_id": task_id, "deadline_at": deadline})]
        _record_event(conn, row, record, letter, actor=by.owner, why=why, dependents=extended)
        outbox = readmit(conn, cfg, row, by.key_id)
    return Rerun(record["id"], task_id, letter["id"], row["status"], record["first_attempt"],
                    record["max_attempts"], task["deadline_at"], deadline, outbox)


def _record_event(conn: psycopg.Connection, row: dict, record: dict, letter: dict, *, actor: str, why: str,
                  dependents: list[int]) -> None:
    details = {"replay_id": record["id"], "replay_of": letter["id"], "first_attempt": record["first_attempt"],
               "max_attempts": record["max_attempts"],
               "dead_letter": {"reason": letter["reason"], "attempts": letter["attempts"],
                               "at": letter["at"].isoformat()},
               "deadline_before": record["deadline_before"].isoformat(),
               "deadline_after": record["deadline_after"].isoformat(),
               "deadline_extended": record["deadline_after"] != record["deadline_before"],
               "dependents_extended": dependents}
    events.record(conn, task_id=row["id"], content_id=row["content_id"], version=row["version"], action=ACTION,
                  from_status=TaskStatus.FAILED.value, to_status=TaskStatus.READY.value, actor=actor,
                  attempt=row["attempts"], reason=why, details=details)

