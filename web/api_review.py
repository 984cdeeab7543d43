"""The JSON API of the review workflow: compare versions, regenerate media, reject or ask for changes,
withdraw an approval, the attention list with its bulk actions, and the bulk lane's pause (admins).

Views parse input, call `pipeline`, and shape the answer; errors become JSON in web.errors.
"""

from __future__ import annotations

from flask import g, jsonify, request, url_for

from pipeline import attention, overview, pauses, regenerate, review
from pipeline.core.errors import InvalidInput
from pipeline.core.records import MAX_NOTE
from web import inputs
from web.api import accepted, bp as api_bp, send_fast
from web.auth import require
from web.db import get_conn, settings

bp = api_bp   # one "api" blueprint; these views live in their own module to keep modules short


def version_arg(name: str, default: int | None) -> int:
    value = inputs.arg_int(name, default if default and default >= 1 else None, low=1, high=inputs.MAX_VERSION,
                           what="a version number")
    if value is None:
        raise InvalidInput(f"{name} is required: a version number", field=name)
    return value


def compared(content_id: int) -> dict:
    """Parse `from` and `to` (default: the current version and the one before it) and compare them."""
    head = overview.content(get_conn(), content_id)
    new = version_arg("to", head["current_version"])
    old = version_arg("from", new - 1)
    return overview.versions_compared(get_conn(), content_id, old, new)


@bp.get("/contents/<id:content_id>/compare")
@require("read")
def compare_versions(content_id: int):
    return jsonify(compared(content_id))


def _decision(content_id: int, version: int, decision: str):
    note = inputs.text(inputs.json_object(), "note", MAX_NOTE)
    done = review.decide(get_conn(), content_id, version, decision, note, actor=g.principal.owner)
    return jsonify({**done, "status_url": url_for("api.get_version", content_id=content_id, version=version)})


@bp.post("/contents/<id:content_id>/versions/<ver:version>/reject")
@require("review")
def reject_version(content_id: int, version: int):
    return _decision(content_id, version, "rejected")


@bp.post("/contents/<id:content_id>/versions/<ver:version>/request-changes")
@require("review")
def request_changes(content_id: int, version: int):
    return _decision(content_id, version, "changes_requested")


@bp.post("/contents/<id:content_id>/versions/<ver:version>/withdraw")
@require("review")
def withdraw_approval(content_id: int, version: int):
    note = inputs.text(inputs.json_object(), "note", MAX_NOTE)
    done = review.withdraw(get_conn(), content_id, version, note, actor=g.principal.owner)
    return jsonify({**done, "delivery_url": url_for("api.get_delivery", content_id=content_id)})


@bp.post("/tasks/<id:task_id>/regenerate")
@require("edit")
def regenerate_task(task_id: int):
    body = inputs.json_object(required=False)
    accept = inputs.flag(body, "accept_new_charge")
    reason = inputs.text(body, "reason", MAX_NOTE) if accept or "reason" in body else ""
    made = regenerate.regenerate(get_conn(), task_id, settings(), actor=g.principal.owner, reason=reason,
                                 accept_new_charge=accept, key_id=g.principal.key_id)
    send_fast(made.saved.outbox_ids)
    return accepted(made.saved, task_id=made.task_id, replaced_task_id=task_id, replaced_sha256=made.replaced_sha256,
                    estimated_cost=made.estimated_cost, task_url=url_for("api.get_task", task_id=made.task_id))


def page_args() -> tuple[int, int]:
    return inputs.page_args()


def attention_filters() -> dict:
    return {"problem": request.args.get("problem") or None, "kind": request.args.get("kind") or None,
            "content_id": inputs.arg_int("content_id", None, low=1, what="a content id")}


@bp.get("/attention")
@require("read")
def attention_list():
    limit, offset = page_args()
    doc = attention.tasks(get_conn(), **attention_filters(), limit=limit, offset=offset)
    for item in doc["items"]:
        item["url"] = url_for("api.get_task", task_id=item["id"])
    return jsonify(doc)


@bp.post("/attention/retry")
@require("edit")
def attention_retry():
    ids = attention.check_ids(inputs.json_object().get("task_ids"))
    bulk = attention.retry_failed(get_conn(), ids, settings(), actor=g.principal.owner,
                                  key_id=g.principal.key_id)
    send_fast(bulk.outbox_ids)
    return jsonify(bulk.as_dict())


@bp.post("/attention/resolve")
@require("edit")
def attention_resolve():
    body = inputs.json_object()
    ids = attention.check_ids(body.get("task_ids"))
    note = inputs.text(body, "note", MAX_NOTE)
    return jsonify(attention.resolve_unknown(get_conn(), ids, note, actor=g.principal.owner).as_dict())


@bp.get("/lanes/bulk")
@require("read")
def bulk_lane():
    return jsonify(pauses.state(get_conn()))


@bp.post("/lanes/bulk/pause")
@require("admin")
def bulk_lane_pause():
    pauses.pause(get_conn(), by=g.principal.owner)
    return jsonify(pauses.state(get_conn()))


@bp.post("/lanes/bulk/resume")
@require("admin")
def bulk_lane_resume():
    resumed = pauses.resume(get_conn(), by=g.principal.owner)
    return jsonify({**pauses.state(get_conn()), "tasks_moved": resumed["tasks_moved"]})
