"""Regenerating a succeeded image or narration: a deliberate new paid call, confirmed and recorded.

The reuse rule answers the same input with the same asset, so a picture an editor dislikes would
come back unchanged however often the block is saved. A regeneration saves the next version of the
content with the block marked for a new call of that kind (a nonce in its input fingerprint,
`pipeline.core.content.with_regeneration`); every other block and kind is reused as in any save.
It is a save in every other way: one transaction, the key's own limits and admission (503 with
Retry-After, nothing written), the budgets at the call itself (a call that would pass a budget is
not made and its task pauses). The event `regenerated` on the new task records who, when, why and
the asset it replaces; that asset stays on the older version's board, and retention keeps it.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import psycopg

from pipeline import db, events, versions
from pipeline.core import lanes
from pipeline.core.content import Draft, block_from_snapshot, with_regeneration
from pipeline.core.errors import Conflict, NotFound
from pipeline.core.principal import Principal
from pipeline.core import kinds
from pipeline.settings import Settings

NEEDS_CONSENT = ("A regeneration makes a new paid call for this {kind} (estimated cost {cost:g}) even though "
                 "the same input already has an asset. Send {{\"accept_new_charge\": true, \"reason\": \"...\"}} "
                 "to regenerate it")


@dataclass(frozen=True)
class Regenerated:
    saved: versions.Saved
    task_id: int                 # the task of the new version that makes the new call
    replaced_sha256: str
    estimated_cost: float


def estimated_cost(cfg: Settings, kind: str) -> float:
    return cfg.providers[kind].cost_per_call


def _target(conn: psycopg.Connection, task_id: int) -> dict:
    task = db.one(conn, "tasks_get_with_version", {"task_id": task_id})
    if task is None:
        raise NotFound(f"task {task_id} does not exist")
    if not kinds.get(task["kind"]).paid:
        raise Conflict(f"task {task_id} is a {task['kind']}, made from the version's media; regenerate one of its "
                       f"images or narrations instead",
                       code="not_regenerable", details={"kind": task["kind"]})
    if task["status"] != "succeeded":
        raise Conflict(f"task {task_id} is {task['status']}; only a succeeded image or narration can be "
                       "regenerated (retry a failed one instead)", code="not_regenerable",
                       details={"status": task["status"]})
    if task["version"] != task["current_version"]:
        raise Conflict(f"task {task_id} belongs to version {task['version']}, but version "
                       f"{task['current_version']} is current; regenerate on the current version",
                       code="not_current")
    return task


def regenerate(conn: psycopg.Connection, task_id: int, cfg: Settings, *, by: Principal, reason: str,
               accept_new_charge: bool) -> Regenerated:
    """Save the next version with this task's media marked for a new paid call; record who, when and why."""
    task = _target(conn, task_id)
    cost = estimated_cost(cfg, task["kind"])
    if not accept_new_charge:
        raise Conflict(NEEDS_CONSENT.format(kind=kinds.get(task["kind"]).word, cost=cost),
                       code="new_charge_unconfirmed", details={"estimated_cost": cost})
    version = db.one(conn, "versions_get", {"content_id": task["content_id"], "version": task["version"]})
    nonce = secrets.token_hex(8)
    blocks = tuple(with_regeneration(block_from_snapshot(b), task["kind"], nonce) if b["key"] == task["block_key"]
                   else block_from_snapshot(b) for b in version["blocks"])
    draft = Draft(version["title"], version["locale"], version["theme"], blocks)
    with conn.transaction():   # the save and its record commit together, or neither does
        saved = versions.save(conn, draft, cfg, by=by, content_id=task["content_id"],
                              base_version=task["version"], lane=lanes.INTERACTIVE)
        new = next(t for t in db.all(conn, "tasks_of_version", {"content_id": saved.content_id,
                                                                "version": saved.version})
                   if (t["kind"], t["block_key"]) == (task["kind"], task["block_key"]))
        events.record(conn, task_id=new["id"], content_id=saved.content_id, version=saved.version,
                      action="regenerated", actor=by.owner, reason=reason, details={
                          "replaced_task_id": task_id, "replaced_version": task["version"],
                          "replaced_sha256": task["asset_sha256"], "nonce": nonce, "estimated_cost": cost})
    return Regenerated(saved, new["id"], task["asset_sha256"], cost)
