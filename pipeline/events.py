"""The audit trail's one writer: an event that no state change writes itself (a person's decision, a
rerun, a regeneration, a note of the work). State changes write theirs in the query that moves the task."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.core.records import clip


def record(conn: psycopg.Connection, *, content_id: int, version: int, action: str, actor: str,
           task_id: int | None = None, from_status: str | None = None, to_status: str | None = None,
           attempt: int | None = None, lease_token=None, reason: str = "", details: dict | None = None) -> None:
    """One row of `events`; the reason is clipped as every record keeps it."""
    db.execute(conn, "events_insert", {
        "task_id": task_id, "content_id": content_id, "version": version, "action": action,
        "from_status": from_status, "to_status": to_status, "actor": actor, "attempt": attempt,
        "lease_token": lease_token, "reason": clip(reason), "details": Jsonb(details) if details else None})
