"""Why a task is where it is, in one line: what it waits for, and what moves it on. Pure.

The task page and `GET /api/tasks/{id}` show it; web.words says it in the editor's language.
The order follows what an operator would look at: a finished task first, then a decision a
person owes, then a running task's heartbeat and lease, then for a task not yet running its
dependencies, its next attempt, and whether its message went out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from pipeline.core.states import TERMINAL, TaskStatus


@dataclass(frozen=True)
class Diagnosis:
    code: str
    params: dict = field(default_factory=dict)

    def english(self) -> str:
        p = self.params
        words = {
            "finished": "finished: {status}",
            "needs_decision": "the outcome of its call is unknown: a person decides (retry, accepting a possible "
                              "second charge, or resolve it)",
            "lease_expired": "running, last heartbeat {heartbeat_age} s ago: its lease ran out at {lease_until}, "
                             "recovery takes it by {recovered_by}",
            "running": "running on {worker}, last heartbeat {heartbeat_age} s ago",
            "starting": "claimed by {worker}, no heartbeat yet",
            "waiting_for_dependency": "waiting for {kind} task {task_id} ({status})",
            "waiting_for_input": "waiting for another task that makes the same input: its end wakes it (at the latest {until})",
            "waiting_for_budget": "waiting for the provider's budget, until {until}",
            "waiting_for_slot": "waiting for a free call slot: the next one to free wakes it (at the latest {until})",
            "waiting_for_storage": "waiting for the store of media and receipts to take writes again: it tries "
                                   "again at {until}, without using up an attempt",
            "backing_off": "backing off until {until} (attempt {attempt} of {max_attempts})",
            "lane_paused": "the bulk lane is paused since {since} by {by}: it starts when the lane resumes, and "
                           "its deadline moves on by the pause",
            "not_sent": "due, not yet sent to a worker: is the dispatcher running?",
            "queued": "sent to its queue {dispatches} times, not yet claimed: are workers running for it? A lost "
                      "message is sent again {resend_after} s after it went out",
        }
        return words[self.code].format(**{k: _text(v) for k, v in p.items()})


def _text(value: object) -> str:
    return value.strftime("%H:%M:%S") if isinstance(value, datetime) else str(value)


def diagnose(task: dict, unmet: list[dict], *, now: datetime, scan_seconds: float,
             resend_after: float) -> Diagnosis:
    """`task`: its row (status, available_at, attempts, max_attempts, worker, heartbeat_at, lease_until,
    waiting_for, dispatches, and lane, lane_paused_at, lane_paused_by while its lane is paused); `unmet`: its dependencies not yet succeeded (id, kind, status), first first."""
    status = TaskStatus(task["status"])
    if status in TERMINAL:
        return Diagnosis("finished", {"status": status.value})
    if status is TaskStatus.UNKNOWN:
        return Diagnosis("needs_decision")
    if status is TaskStatus.RUNNING:
        return _running(task, now, scan_seconds)
    if unmet:
        first = unmet[0]
        return Diagnosis("waiting_for_dependency", {"kind": first["kind"], "task_id": first["id"],
                                                    "status": first["status"]})
    if task["available_at"] > now:
        code = {"input": "waiting_for_input", "budget": "waiting_for_budget", "slot": "waiting_for_slot",
                "storage": "waiting_for_storage"}.get(task["waiting_for"], "backing_off")
        return Diagnosis(code, {"until": task["available_at"], "attempt": task["attempts"] + 1,
                                "max_attempts": task["max_attempts"]})
    if task.get("lane_paused_at") is not None:
        return Diagnosis("lane_paused", {"lane": task["lane"], "since": task["lane_paused_at"],
                                         "by": task["lane_paused_by"]})
    if not task["dispatches"]:
        return Diagnosis("not_sent")
    return Diagnosis("queued", {"dispatches": task["dispatches"], "resend_after": f"{resend_after:g}"})


def _running(task: dict, now: datetime, scan_seconds: float) -> Diagnosis:
    worker = task["worker"] or "?"
    if task["lease_until"] is not None and task["lease_until"] < now:
        beat = task["heartbeat_at"]
        return Diagnosis("lease_expired", {
            "heartbeat_age": "?" if beat is None else round((now - beat).total_seconds()),
            "lease_until": task["lease_until"],
            "recovered_by": max(now, task["lease_until"]) + timedelta(seconds=scan_seconds)})
    if task["heartbeat_at"] is None:
        return Diagnosis("starting", {"worker": worker})
    return Diagnosis("running", {"worker": worker,
                                 "heartbeat_age": round((now - task["heartbeat_at"]).total_seconds())})
