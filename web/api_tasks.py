"""The JSON API for single tasks (timeline, retry, replay, resolve) and demo jobs."""

from __future__ import annotations

from flask import g, jsonify, url_for

from pipeline import demo, overview, replay, review
from pipeline.core.replay import MAX_EXTENSION_SECONDS
from pipeline.core.errors import InvalidInput, NotFound
from pipeline.core.records import MAX_NOTE
from web import inputs
from web.api import accepted, bp as api_bp, media_url, send_fast
from web.auth import require
from web.db import get_conn, settings

bp = api_bp  # one "api" blueprint; these views live in their own module to keep modules short


@bp.get("/tasks/<id:task_id>")
@require("read")
def get_task(task_id: int):
    doc = overview.task(get_conn(), task_id, settings())
    doc["asset_url"] = media_url(doc["sha256"])
    doc["version_url"] = url_for("api.get_version", content_id=doc["content_id"], version=doc["version"])
    return jsonify(doc)


@bp.post("/tasks/<id:task_id>/retry")
@require("edit")
def retry_task(task_id: int):
    body = inputs.json_object(required=False)
    accept = inputs.flag(body, "accept_duplicate_risk")
    reopened = review.retry(get_conn(), task_id, settings(), actor=g.principal.owner, accept_duplicate_risk=accept,
                            key_id=g.principal.key_id)
    send_fast(reopened.outbox_ids)
    location = url_for("api.get_task", task_id=task_id)
    response = jsonify(task_id=task_id, status=reopened.status, attempts=reopened.attempts,
                       max_attempts=reopened.max_attempts, deadline_at=reopened.deadline_at,
                       duplicate_risk_accepted=accept, status_url=location)
    response.status_code = 202
    response.headers["Location"] = location
    return response


def _extension(body: dict) -> int | None:
    value = body.get("extend_deadline_seconds")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_EXTENSION_SECONDS:
        raise InvalidInput(f"extend_deadline_seconds must be a whole number from 1 to {MAX_EXTENSION_SECONDS}, or "
                           "left out to keep the deadline", field="extend_deadline_seconds")
    return value


@bp.post("/tasks/<id:task_id>/replay")
@require("edit")
def replay_task(task_id: int):
    body = inputs.json_object()
    why = inputs.text(body, "why", MAX_NOTE)
    done = replay.replay(get_conn(), task_id, settings(), actor=g.principal.owner, why=why, key_id=g.principal.key_id,
                         extend_deadline_seconds=_extension(body))
    send_fast(done.outbox_ids)
    location = url_for("api.get_task", task_id=task_id)
    response = jsonify(task_id=task_id, replay_id=done.replay_id, replay_of=done.replay_of, status=done.status,
                       first_attempt=done.first_attempt, max_attempts=done.max_attempts,
                       deadline_before=done.deadline_before, deadline_after=done.deadline_after,
                       status_url=location)
    response.status_code = 202
    response.headers["Location"] = location
    return response


@bp.post("/tasks/<id:task_id>/resolve")
@require("edit")
def resolve_task(task_id: int):
    body = inputs.json_object()
    if body.get("outcome") != "failed":
        raise InvalidInput("outcome must be \"failed\": an unknown task can be closed as failed here; "
                           "a success is recorded only from the provider's own answer", field="outcome")
    note = inputs.text(body, "note", MAX_NOTE)
    row = review.resolve_failed(get_conn(), task_id, note, actor=g.principal.owner)
    return jsonify(task_id=task_id, status=row["status"], last_error=row["last_error"],
                   status_url=url_for("api.get_task", task_id=task_id))


@bp.post("/jobs")
@require("edit", demo_without_key=True)
def create_job():
    cfg = settings()
    if not cfg.demo_mode:
        raise NotFound("demo jobs exist only in demo mode (DEMO_MODE=true)")
    theme, scenario, locale = demo.parse_job(inputs.json_body())
    saved = demo.start_job(get_conn(), cfg, theme, scenario, locale=locale, actor=g.principal.owner,
                           key_id=g.principal.key_id)
    send_fast(saved.outbox_ids)
    return accepted(saved, theme=theme, scenario=scenario)
