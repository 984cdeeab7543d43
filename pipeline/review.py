"""Decisions people make about versions and tasks: approve, reject or ask for changes, withdraw an
approval, retry, resolve, and the delivery gate.

Each action is one short transaction around a guarded UPDATE (`... WHERE <expected
state> RETURNING`): zero rows means someone else changed the row first, and the
action raises `Conflict` having written nothing. Every action writes an event
naming the person (the API key's owner). What blocks a delivery is decided in
`pipeline.core.delivery` (pure). This module knows nothing of HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import psycopg

from pipeline import bundle, db, events, tasks, versions
from pipeline.core import lanes
from pipeline.core.delivery import ApprovalBlocker, approval_blockers, delivery_blockers
from pipeline.core.errors import Conflict, NotFound, StaleTransition
from pipeline.core.people import same_person
from pipeline.core.principal import Principal
from pipeline.core import kinds
from pipeline.core.states import TaskStatus, check_transition
from pipeline.settings import Settings

# Who an API key's holder acts as in the state machine (pipeline.core.states.TRANSITIONS).
EDITOR = "editor"
DUPLICATE_RISK = ("The provider may already have done this work and charged for it; we could not confirm. "
                  "Retrying may pay for it twice. Send {\"accept_duplicate_risk\": true} to retry anyway, "
                  "or resolve the task as failed after checking the provider's dashboard.")


@dataclass(frozen=True)
class Approval:
    content_id: int
    version: int
    approved_at: datetime
    approved_by: str


@dataclass(frozen=True)
class Reopened:
    task_id: int
    status: str
    attempts: int
    max_attempts: int
    deadline_at: datetime
    outbox_ids: tuple[int, ...] = ()     # the caller may send these at once (fast path)


def _event(conn: psycopg.Connection, row: dict, action: str, *, actor: str, to_status: str | None,
           from_status: str | None, reason: str, details: dict | None = None, task_id: int | None = None) -> None:
    events.record(conn, task_id=task_id, content_id=row["content_id"], version=row["version"], action=action,
                  from_status=from_status, to_status=to_status, actor=actor, attempt=row.get("attempts"),
                  reason=reason, details=details)


def approve(conn: psycopg.Connection, content_id: int, version: int, *, by: Principal,
            allow_self: bool = True) -> Approval:
    """`by` approves a version whose media all succeeded; refused for a version older than the approved one.

    Without `allow_self` (ALLOW_SELF_APPROVAL), the key or the person that saved the version may not approve
    it (Conflict `self_approval`): a second person looks at what will be delivered."""
    with conn.transaction():
        content = db.one(conn, "contents_lock", {"content_id": content_id})
        saved = db.one(conn, "versions_get", {"content_id": content_id, "version": version})
        if content is None or saved is None:
            raise NotFound(f"content {content_id} has no version {version}")
        if not allow_self and (same_person(saved["saved_by"], by.owner)
                               or (by.key_id and saved["saved_by_key"] == by.key_id)):
            raise Conflict(f"version {version} was saved by {saved['saved_by']}; another person must approve it "
                           "(ALLOW_SELF_APPROVAL=true lifts this rule)", code="self_approval",
                           details={"saved_by": saved["saved_by"]})
        tasks_now = db.all(conn, "tasks_of_version_states", {"content_id": content_id, "version": version})
        for blocker in approval_blockers(tasks_now, version=version, approved_version=content["approved_version"]):
            raise _approval_refused(version, blocker)
        row = db.one(conn, "contents_approve", {"content_id": content_id, "version": version, "actor": by.owner})
        if row is None:
            raise Conflict(f"version {version} changed while approving; reload and try again", code="stale")
        _event(conn, {"content_id": content_id, "version": version}, "approved", actor=by.owner, to_status=None,
               from_status=None, reason=f"version {version} approved for delivery")
    return Approval(content_id, version, row["approved_at"], by.owner)


def _approval_refused(version: int, blocker: ApprovalBlocker) -> Conflict:
    if blocker.code == "older_than_approved":
        approved = blocker.approved_version
        return Conflict(f"version {version} is older than the approved version {approved}; approve version "
                        f"{approved} or a newer one", code=blocker.code, details={"approved_version": approved})
    listed = ", ".join(f"{t['kind']} of {t['block_key']} is {t['status']}" for t in blocker.waiting[:10])
    return Conflict(f"version {version} is not complete: {listed}; approve it once every image and narration "
                    "has succeeded", code=blocker.code,
                    details={"tasks": [{"id": t["id"], "status": t["status"]} for t in blocker.waiting]})


DECISIONS = ("rejected", "changes_requested")


def _version_locked(conn: psycopg.Connection, content_id: int, version: int) -> dict:
    content = db.one(conn, "contents_lock", {"content_id": content_id})
    if content is None or db.one(conn, "versions_get", {"content_id": content_id, "version": version}) is None:
        raise NotFound(f"content {content_id} has no version {version}")
    return content


def decide(conn: psycopg.Connection, content_id: int, version: int, decision: str, note: str, *,
           by: Principal) -> dict:
    """A reviewer rejects a version or asks for changes, with a note, recorded on the version's history.

    Refused (409 `version_approved`) for the approved version: withdraw its approval first, so the
    delivery never serves a version whose last word is a rejection.
    """
    if decision not in DECISIONS:
        raise ValueError(f"decision must be one of {DECISIONS}")
    with conn.transaction():
        content = _version_locked(conn, content_id, version)
        if content["approved_version"] == version:
            raise Conflict(f"version {version} is approved and delivered; withdraw its approval first, then "
                           f"{'reject it' if decision == 'rejected' else 'ask for changes'}",
                           code="version_approved", details={"approved_version": version})
        words = "rejected" if decision == "rejected" else "changes requested"
        _event(conn, {"content_id": content_id, "version": version}, decision, actor=by.owner, to_status=None,
               from_status=None, reason=note, details={"decision": decision, "summary": f"version {version} "
                                                               f"{words}"})
    return {"content_id": content_id, "version": version, "decision": decision, "note": note, "by": by.owner}


def withdraw(conn: psycopg.Connection, content_id: int, version: int, note: str, *, by: Principal) -> dict:
    """A reviewer withdraws the approval of the approved version: the delivery answers 409 with the note.

    The withdrawal's event is the record (pipeline.core.approvals): the version shows approved no longer.
    """
    with conn.transaction():
        content = _version_locked(conn, content_id, version)
        if content["approved_version"] != version:
            raise Conflict(f"version {version} is not the approved version "
                           f"({content['approved_version'] or 'none is'}); nothing to withdraw",
                           code="not_approved", details={"approved_version": content["approved_version"]})
        if db.one(conn, "contents_withdraw_approval", {"content_id": content_id, "version": version}) is None:
            raise Conflict(f"version {version} changed while withdrawing; reload and try again", code="stale")
        _event(conn, {"content_id": content_id, "version": version}, "approval_withdrawn", actor=by.owner,
               to_status=None, from_status=None, reason=note, details={"decision": "approval_withdrawn"})
    return {"content_id": content_id, "version": version, "withdrawn_by": by.owner, "note": note}


def ensure_runnable_version(task: dict, verb: str) -> None:
    """Conflict unless the task (a `tasks_get_with_version` row) belongs to its content's current,
    uncancelled version: work is only added again where it can still be delivered."""
    if task["version"] != task["current_version"]:
        raise Conflict(f"task {task['id']} belongs to version {task['version']}, but version "
                       f"{task['current_version']} is current; {verb} its tasks there", code="not_current")
    if task["cancel_requested_at"] is not None:
        raise Conflict(f"version {task['version']} was cancelled; save a new version to run it again",
                       code="version_cancelled")


def _task_for_action(conn: psycopg.Connection, task_id: int, target: TaskStatus) -> dict:
    task = db.one(conn, "tasks_get_with_version", {"task_id": task_id})
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    try:
        check_transition(task["status"], target, EDITOR)
    except StaleTransition as exc:
        raise Conflict(f"task {task_id} is {task['status']}: {exc}; only failed or unknown tasks can be "
                       "retried, and only unknown ones resolved", code="invalid_transition",
                       details={"status": task["status"]}) from None
    return task


def retry(conn: psycopg.Connection, task_id: int, cfg: Settings, *, by: Principal,
          accept_duplicate_risk: bool = False) -> Reopened:
    """An editor (`by`) sends a failed task (or, accepting the risk, an unknown one) back to `ready`; what it may
    cost is booked against `by`'s key.

    The attempt budget reopens (`max_attempts = attempts + MAX_ATTEMPTS`) and the task gets a fresh
    deadline of TASK_DEADLINE_SECONDS from now, shared with dependents still waiting on it
    (see docs/decisions.md). The dead letter moves into the event's details.
    """
    with conn.transaction():
        task = _task_for_action(conn, task_id, TaskStatus.READY)
        unknown = task["status"] == TaskStatus.UNKNOWN.value
        if unknown and not accept_duplicate_risk:
            raise Conflict(f"task {task_id} has an unknown outcome. {DUPLICATE_RISK}", code="duplicate_risk")
        ensure_runnable_version(task, "retry")
        dead = db.one(conn, "dead_letters_take", {"task_id": task_id})
        refusal = db.one(conn, "refused_inputs_forget", {"task_id": task_id})   # asked for again, by a person
        row = tasks.reopen(conn, task_id, task["status"], budget=cfg.max_attempts,
                           deadline_seconds=cfg.deadline_seconds)
        if row is None:
            raise Conflict(f"task {task_id} changed while retrying; reload and try again", code="stale")
        action, reason = (("duplicate_risk_accepted", "retry accepted with the risk of a duplicate charge")
                          if unknown else ("manual_retry", "retried by an editor"))
        details = {"max_attempts": row["max_attempts"], **({"dead_letter": dead} if dead else {}),
                   **({"refusal_overridden": refusal} if refusal else {})}
        _event(conn, row, action, actor=by.owner, from_status=task["status"], to_status="ready", reason=reason,
               task_id=task_id, details=details)
        db.all(conn, "tasks_extend_waiting_dependents", {"task_id": task_id, "deadline_at": row["deadline_at"]})
        outbox = readmit(conn, cfg, row, by.key_id)
    return Reopened(task_id, row["status"], row["attempts"], row["max_attempts"], row["deadline_at"], outbox)


def readmit(conn: psycopg.Connection, cfg: Settings, row: dict, key_id: int | None = None) -> tuple[int, ...]:
    """A task an editor sent back to `ready` (a retry, a rerun), in the caller's transaction: it passes
    admission like a save's work (CapacityExceeded: the caller rolls back, nothing changes), and its message
    is queued, in the interactive lane whatever lane its version was saved in, unless it still waits for a
    dependency; what it may cost is booked against `key_id`'s daily spend (pipeline/keyspend.py). The outbox ids
    the caller may send at once."""
    versions.admit(conn, cfg, 1, lanes.INTERACTIVE, key_id=key_id, task_ids=[row["id"]])
    if db.scalar(conn, "tasks_unmet_dependencies", {"task_id": row["id"]}):
        return ()
    added = db.one(conn, "outbox_add", {"task_id": row["id"], "lane": lanes.INTERACTIVE,
                                        "available_at": row["available_at"]})
    return (added["id"],) if added else ()


def resolve_failed(conn: psycopg.Connection, task_id: int, note: str, *, by: Principal) -> dict:
    """An editor (`by`) closes an `unknown` task as failed (e.g. after checking the vendor's dashboard)."""
    with conn.transaction():
        _task_for_action(conn, task_id, TaskStatus.FAILED)
        row = tasks.resolve_failed(conn, task_id, f"resolved: {note}")
        if row is None:
            raise Conflict(f"task {task_id} changed while resolving; reload and try again", code="stale")
        _event(conn, row, "resolved_failed", actor=by.owner, from_status="unknown", to_status="failed",
               reason=note, task_id=task_id)
    return row


def delivery(conn: psycopg.Connection, content_id: int) -> dict:
    """The manifest of the approved version, when it is approved and every task of it succeeded.

    Raises Conflict (code `not_deliverable`, details from `Blockers.as_dict`) otherwise.
    """
    with conn.transaction():
        content = db.one(conn, "contents_get", {"content_id": content_id})
        if content is None:
            raise NotFound(f"content {content_id} does not exist")
        version = content["approved_version"] or content["current_version"]
        rows = db.all(conn, "tasks_of_version", {"content_id": content_id, "version": version})
        withdrawn = None
        if content["approved_version"] is None:
            last = db.one(conn, "events_last_version_decision", {"content_id": content_id})
            if last is not None and last["action"] == "approval_withdrawn":
                withdrawn = {"version": last["version"], "by": last["actor"], "at": last["at"].isoformat(),
                             "note": last["reason"]}
        blockers = delivery_blockers(content["approved_version"], content["current_version"], rows, withdrawn)
        if blockers.reasons:
            why = (f"; the approval of version {withdrawn['version']} was withdrawn by {withdrawn['by']}: "
                   f"{withdrawn['note']}") if withdrawn else ""
            raise Conflict(f"content {content_id} cannot be delivered yet: {', '.join(blockers.reasons)}{why}",
                           code="not_deliverable", details=blockers.as_dict())
        doc = bundle.manifest(conn, content_id, version)
    package = next(t for t in rows if kinds.get(t["kind"]).completes_version)
    return {**doc, "approved": True, "bundle": {"sha256": package["asset_sha256"]}}
