"""What needs a person, across every content: one list, filterable, with what each task allows, and the
bulk actions that are safe.

The list is the view `tasks_needing_attention` (schema/0008): tasks of current versions whose outcome is
unknown, whose prompt the provider refused, whose model the provider no longer serves, that failed, that a budget paused, that still wait past their deadline, or that were cancelled
when the key that saved them was revoked, and those that wait for the store of media and receipts to take writes
again ('storage', schema/0027: before their call, or holding a paid result that the store refused). Each row says which
actions a person may take (`ACTIONS`). Bulk actions are only the safe ones: retrying failed tasks (all or
nothing: one transaction, one admission check, so over capacity it is 503 and nothing changes) and closing
unknown tasks as failed with one note. An `unknown` task is never retried in bulk: a retry of it may pay
twice, and that consent is given task by task (`pipeline.review.retry`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import psycopg

from pipeline import db, review, teams
from pipeline.core.errors import Conflict, InvalidInput, NotFound
from pipeline.core import kinds
from pipeline.core.principal import Principal
from pipeline.settings import Settings

PROBLEMS = ("unknown", "refused", "model_gone", "failed", "budget", "storage", "stuck", "revoked")
# What a person may do with a task, by its problem.
ACTIONS = {"unknown": ("retry_with_consent", "resolve_failed"), "failed": ("retry",),
           "refused": ("edit_block", "retry"),   # rewrite the prompt; a retry sends the same prompt again
           "model_gone": ("set_live_model", "retry"),   # an operator sets a live *_MODEL and restarts, then a retry
           "budget": ("cancel_version",), "stuck": ("cancel_version",),
           "storage": (),   # an operator frees space or makes MEDIA_DIR writable; the tasks go on by themselves
           "revoked": ("save_again",)}   # cancelled with its revoked key: saved again under a live key, if wanted
MAX_BULK = 200


def tasks(conn: psycopg.Connection, *, team: str | None, problem: str | None = None, kind: str | None = None,
          content_id: int | None = None, limit: int = 50, offset: int = 0) -> dict:
    """What needs a person in a team's contents (None: every team's)."""
    if problem is not None and problem not in PROBLEMS:
        raise InvalidInput(f"problem must be one of {', '.join(PROBLEMS)}", field="problem")
    if kind is not None and kind not in kinds.names():
        raise InvalidInput(f"kind must be one of {', '.join(kinds.names())}", field="kind")
    params = {"problem": problem, "kind": kind, "content_id": content_id, "limit": limit, "offset": offset,
              "team": team}
    with conn.transaction():
        rows = db.all(conn, "attention_tasks", params)
        counts = {r["problem"]: r["n"] for r in db.all(conn, "attention_counts", params)}
    items = [{**row, "actions": list(ACTIONS[row["problem"]])} for row in rows]
    total = counts.get(problem, 0) if problem else sum(counts.values())
    return {"items": items, "counts": {p: counts.get(p, 0) for p in PROBLEMS}, "total": total,
            "limit": limit, "offset": offset, "filters": {"problem": problem, "kind": kind, "content_id": content_id}}


@dataclass
class Bulk:
    done: list[int] = field(default_factory=list)
    refused: list[dict] = field(default_factory=list)
    outbox_ids: list[int] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"done": self.done, "refused": self.refused}


def check_ids(task_ids: object) -> list[int]:
    if not isinstance(task_ids, list) or not task_ids or len(task_ids) > MAX_BULK \
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 < i < 2**63 for i in task_ids):
        raise InvalidInput(f"task_ids must be a list of 1 to {MAX_BULK} task ids", field="task_ids")
    return list(dict.fromkeys(task_ids))


def _refused(bulk: Bulk, task_id: int, exc: Exception) -> None:
    bulk.refused.append({"task_id": task_id, "code": getattr(exc, "code", "not_found"), "message": str(exc)})


def retry_failed(conn: psycopg.Connection, task_ids: list[int], cfg: Settings, *, by: Principal,
                 changes: str = "bulk retry") -> Bulk:
    """Retry every failed task of the list that `by` may see, in one transaction; unknown ones are refused
    (`needs_consent`), another team's as missing ones.

    CapacityExceeded from the admission of any of them rolls back all of them (503, nothing changed).
    """
    bulk = Bulk()
    with conn.transaction():
        for task_id in task_ids:
            try:
                teams.check(conn, by, task_id=task_id, changes=changes)
            except NotFound as exc:
                _refused(bulk, task_id, exc)
                continue
            row = db.one(conn, "tasks_get", {"task_id": task_id})
            if row is not None and row["status"] == "unknown":
                bulk.refused.append({"task_id": task_id, "code": "needs_consent",
                                     "message": "an unknown task may already be paid for; retry it on its own, "
                                                "accepting the risk of a duplicate charge"})
                continue
            try:
                reopened = review.retry(conn, task_id, cfg, by=by)
            except (Conflict, NotFound) as exc:
                _refused(bulk, task_id, exc)
                continue
            bulk.done.append(task_id)
            bulk.outbox_ids.extend(reopened.outbox_ids)
    return bulk


def resolve_unknown(conn: psycopg.Connection, task_ids: list[int], note: str, *, by: Principal,
                    changes: str = "bulk resolve") -> Bulk:
    """Close every unknown task of the list that `by` may see as failed with one note (no call is made, nothing
    is paid); another team's are refused as missing ones."""
    bulk = Bulk()
    for task_id in task_ids:
        try:
            teams.check(conn, by, task_id=task_id, changes=changes)
            review.resolve_failed(conn, task_id, note, by=by)
        except (Conflict, NotFound) as exc:
            _refused(bulk, task_id, exc)
            continue
        bulk.done.append(task_id)
    return bulk
