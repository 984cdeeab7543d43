"""Read models for people and monitors: contents list, version board, task timeline, spend, gauges,
and the stored media files they point at.

Everything here only reads. Each function runs its queries in one read transaction so
a page shows one consistent moment; shaping rows into documents is done by small pure
functions (`pipeline.core.board.progress`, `pipeline.core.ledger.version_spend`). The web asks here for
receipts and media files too (it never opens the receipt book or the media store itself).
URLs are the web layer's business: documents carry sha256 digests, not paths.
"""

from __future__ import annotations

from collections import Counter

import psycopg

from pipeline import db, storage
from pipeline.core import approvals
from pipeline.core.board import (FINISHED, REVIEW_DECISIONS, TERMINAL_NAMES, WAITING, like_pattern, progress,
                                 version_status)
from pipeline.core.compare import Side, compare
from pipeline.core.delivery import approval_blockers
from pipeline.core.diagnosis import diagnose
from pipeline.core.errors import NotFound
from pipeline.core.ledger import dollars, version_spend
from pipeline.core.rerun import runs as run_chain
from pipeline.core import kinds
from pipeline.settings import Settings


def contents_list(conn: psycopg.Connection, *, team: str | None, limit: int = 50, offset: int = 0,
                  query: str | None = None, before: int | None = None) -> dict:
    """A team's contents (None: every team's), newest first, a page at a time; `query` searches titles and the
    current version's text. `before` (keyset paging): the page after the one that ended with that id,
    `next_before` in the answer."""
    pattern = like_pattern(query)
    with conn.transaction():
        rows = db.all(conn, "contents_overview", {"limit": limit, "offset": offset, "pattern": pattern,
                                                  "before": before, "team": team})
        total = db.scalar(conn, "contents_count", {"pattern": pattern, "team": team})
    items = [{"id": r["id"], "title": r["title"], "locale": r["locale"], "theme": r["theme"],
              "current_version": r["current_version"], "approved_version": r["approved_version"],
              "updated_at": r["updated_at"], "progress": progress(r["counts"])} for r in rows]
    return {"items": items, "total": total, "limit": limit, "offset": offset, "query": (query or "").strip() or None,
            "next_before": items[-1]["id"] if len(items) == limit else None}


def approval_record(conn: psycopg.Connection, content_id: int) -> approvals.Record:
    """A content's approval record, from its events (pipeline.core.approvals), in the caller's transaction."""
    return approvals.record(db.all(conn, "events_approvals_of_content", {"content_id": content_id}))


def _approval_fields(record: approvals.Record, number: int) -> dict:
    step = record.approval_of(number)
    return {"is_approved": step is not None, "approved_at": step.at if step else None,
            "approved_by": step.by if step else None}


def content(conn: psycopg.Connection, content_id: int) -> dict:
    """A content with its versions, each saying whether it is the approved one, by whom and when (from the events),
    and the approval record."""
    with conn.transaction():
        row = db.one(conn, "contents_get", {"content_id": content_id})
        if row is None:
            raise NotFound(f"content {content_id} does not exist")
        versions = db.all(conn, "versions_of_content", {"content_id": content_id})
        current = db.one(conn, "versions_get", {"content_id": content_id, "version": row["current_version"]})
        record = approval_record(conn, content_id)
    return {"id": row["id"], "title": row["title"], "locale": row["locale"], "theme": row["theme"],
            "current_version": row["current_version"], "approved_version": record.approved_version,
            "created_at": row["created_at"], "updated_at": row["updated_at"],
            "blocks": current["blocks"] if current else [],
            "versions": [{**v, **_approval_fields(record, v["version"])} for v in versions],
            "approvals": [step.as_dict() for step in record.history]}


def approved_version(conn: psycopg.Connection, content_id: int) -> int | None:
    """The version a content delivers now: None while none is approved, and for a content that does not exist."""
    row = db.one(conn, "contents_get", {"content_id": content_id})
    return None if row is None else row["approved_version"]


def asset(conn: psycopg.Connection, sha256: str) -> dict | None:
    """A stored medium's index row (`media_type`, `size`, ...), or None for a file the assets index does not hold."""
    return db.one(conn, "assets_get", {"sha256": sha256})


def _task_doc(row: dict, events: list[dict]) -> dict:
    return {"id": row["id"], "kind": row["kind"], "block": row["block_key"], "status": row["status"],
            "terminal": row["status"] in TERMINAL_NAMES,
            "attempts": row["attempts"], "max_attempts": row["max_attempts"], "dispatches": row["dispatches"],
            "next_attempt_at": row["available_at"] if row["status"] in WAITING else None,
            "deadline_at": row["deadline_at"], "lease_until": row["lease_until"],
            "last_error": row["last_error"], "last_error_code": row["last_error_code"],
            "dead_letter": row["dead_letter"], "waiting_for": row["waiting_for"],
            "sha256": row["asset_sha256"], "media_type": row["media_type"], "size": row["asset_size"],
            "duration_ms": row["duration_ms"], "reusable": row["reusable"], "updated_at": row["updated_at"],
            "events": events}


def _event_doc(row: dict) -> dict:
    return {key: row[key] for key in ("id", "action", "from_status", "to_status", "actor", "attempt", "reason",
                                      "details", "at")}


def version(conn: psycopg.Connection, content_id: int, number: int) -> dict:
    """The board of one version: blocks, tasks with their events, progress, spend, approval state."""
    with conn.transaction():
        head = db.one(conn, "contents_get", {"content_id": content_id})
        row = db.one(conn, "versions_get", {"content_id": content_id, "version": number})
        if head is None or row is None:
            raise NotFound(f"content {content_id} has no version {number}")
        tasks = db.all(conn, "tasks_of_version_view", {"content_id": content_id, "version": number})
        events = db.all(conn, "events_of_version", {"content_id": content_id, "version": number})
        calls = db.all(conn, "provider_calls_of_version", {"content_id": content_id, "version": number})
        record = approval_record(conn, content_id)
    by_task: dict[int | None, list[dict]] = {}
    for event in events:
        by_task.setdefault(event["task_id"], []).append(_event_doc(event))
    docs = [_task_doc(t, by_task.get(t["id"], [])) for t in tasks]
    by_block = {(t["kind"], t["block"]): t for t in docs}
    blocks = [{**b, **{kind.medium: by_block.get((kind.name, b["key"])) for kind in kinds.media()}}
              for b in row["blocks"]]
    status = version_status(((t["kind"], t["status"]) for t in docs), row["cancel_requested_at"] is not None)
    blockers = [b.summary() for b in approval_blockers(docs, version=number,
                                                       approved_version=record.approved_version)]
    decisions = [e for e in by_task.get(None, []) if e["action"] in REVIEW_DECISIONS]
    return {"content_id": content_id, "version": number, "title": row["title"], "locale": row["locale"],
            "theme": row["theme"], "saved_by": row["saved_by"], "saved_at": row["saved_at"],
            "deadline_at": row["deadline_at"], "priority": row["lane"], "current_version": head["current_version"],
            "approved_version": record.approved_version, "is_current": number == head["current_version"],
            **_approval_fields(record, number), "approvals": [step.as_dict() for step in record.history],
            "cancel_requested_at": row["cancel_requested_at"],
            "cancel_requested_by": row["cancel_requested_by"],
            "status": status, "terminal": status in FINISHED,
            "progress": progress(Counter(t["status"] for t in docs)), "blocks": blocks, "tasks": docs,
            **{kind.medium: by_block.get((kind.name, None)) for kind in kinds.every() if not kind.per_block},
            "approvable": not blockers, "approval_blockers": blockers,
            "running": any(t["status"] in ("ready", "running", "retry") for t in docs),
            "events": by_task.get(None, []), "spend": version_spend(calls),
            "review": decisions[-1] if decisions else None}


def versions_compared(conn: psycopg.Connection, content_id: int, old: int, new: int) -> dict:
    """Two versions of a content side by side (pipeline.core.compare), in one read transaction."""
    sides = []
    with conn.transaction():
        for number in (old, new):
            row = db.one(conn, "versions_get", {"content_id": content_id, "version": number})
            if row is None:
                raise NotFound(f"content {content_id} has no version {number}")
            tasks = db.all(conn, "tasks_of_version_with_cost", {"content_id": content_id, "version": number})
            sides.append(Side(number, row["title"], row["locale"], row["theme"], row["blocks"], tasks))
    return {"content_id": content_id, **compare(*sides)}


def task(conn: psycopg.Connection, task_id: int, cfg: Settings) -> dict:
    """A task's timeline: its events, ledger rows, its runs (first, then one per rerun) and its receipts in the
    store (pipeline.storage); its lease, unmet dependencies and a one-line diagnosis (pipeline.core.diagnosis),
    with the recovery settings of `cfg` that bound how long a stuck task waits."""
    with conn.transaction():
        row = db.one(conn, "tasks_get_for_view", {"task_id": task_id})
        if row is None:
            raise NotFound(f"task {task_id} does not exist")
        events = db.all(conn, "events_of_task", {"task_id": task_id})
        calls = db.all(conn, "provider_calls_of_task_view", {"task_id": task_id})
        runs = run_chain(db.all(conn, "dead_letters_of_task", {"task_id": task_id}),
                         db.all(conn, "replays_of_task", {"task_id": task_id}))
        unmet = db.all(conn, "tasks_unmet_of_task", {"task_id": task_id})
    why = diagnose(row, unmet, now=row["now"], scan_seconds=cfg.recovery_scan_seconds,
                   resend_after=cfg.lost_dispatch_seconds)
    return {"id": row["id"], "content_id": row["content_id"], "version": row["version"], "title": row["title"],
            "kind": row["kind"], "block": row["block_key"], "status": row["status"], "attempts": row["attempts"],
            "terminal": row["status"] in TERMINAL_NAMES,
            "max_attempts": row["max_attempts"], "dispatches": row["dispatches"],
            "next_attempt_at": row["available_at"] if row["status"] in WAITING else None,
            "deadline_at": row["deadline_at"], "last_error": row["last_error"],
            "last_error_code": row["last_error_code"], "waiting_for": row["waiting_for"],
            "sha256": row["asset_sha256"], "input": row["input"], "fingerprint": row["fingerprint"],
            "is_current": row["version"] == row["current_version"],
            "events": [_event_doc(e) for e in events],
            "calls": [{k: c[k] for k in ("id", "attempt", "provider", "model", "outcome", "http_status",
                                         "latency_ms", "at")} | {"cost": dollars(c["cost"]),
                                                                  "accepted_by": c["consented_by"]} for c in calls],
            "runs": runs, "receipts": storage.receipt_book(cfg).of_task(task_id),
            "lease": {"holder": row["worker"], "until": row["lease_until"], "heartbeat_at": row["heartbeat_at"]}
            if row["status"] == "running" else None,
            "unmet_dependencies": unmet,
            "diagnosis": {"code": why.code, "params": why.params, "text": why.english()}}


def task_brief(conn: psycopg.Connection, task_id: int) -> dict:
    """A task's place and state, without its history (the regeneration's confirmation)."""
    row = db.one(conn, "tasks_get_for_view", {"task_id": task_id})
    if row is None:
        raise NotFound(f"task {task_id} does not exist")
    return {"id": row["id"], "content_id": row["content_id"], "version": row["version"], "title": row["title"],
            "kind": row["kind"], "block": row["block_key"], "status": row["status"], "sha256": row["asset_sha256"],
            "input": row["input"], "is_current": row["version"] == row["current_version"]}


def task_place(conn: psycopg.Connection, task_id: int) -> tuple[int, int]:
    """(content_id, version) of a task."""
    row = db.one(conn, "tasks_get", {"task_id": task_id})
    if row is None:
        raise NotFound(f"task {task_id} does not exist")
    return row["content_id"], row["version"]


def gauges(conn: psycopg.Connection) -> dict:
    """Numbers for /metrics, from PostgreSQL so every process reports the same.

    Every read is bounded: unfinished and failed tasks through partial indexes, and counters
    kept by triggers instead of counting the event history or the call ledger. Counter rows of
    database backends that have ended are folded together first, so they stay few.
    """
    with conn.transaction():
        db.execute(conn, "metric_counters_fold")
    with conn.transaction():
        return {"tasks": db.all(conn, "metrics_tasks_by_status"), "snapshot": db.one(conn, "metrics_snapshot"),
                "calls": db.all(conn, "metrics_calls_by_outcome"), "waits": db.all(conn, "metrics_waits"),
                "latency": db.all(conn, "metrics_latency_buckets"),
                "dead_letters": db.all(conn, "metrics_dead_letters"),
                "missed_slots": db.all(conn, "metrics_missed_slots"),
                "waiting_by_lane": db.all(conn, "metrics_oldest_waiting_by_lane")}
