"""The JSON API for contents and versions: save, read, approve, cancel, deliver.

Views parse input, call `pipeline`, and shape the answer; errors become JSON in web.errors.
"""

from __future__ import annotations

from flask import Blueprint, Response, g, jsonify, url_for

from pipeline import dispatch, lanes, overview, review, versions
from pipeline.core.content import parse_draft
from pipeline.log import log
from pipeline.versions import Saved
from web import inputs
from web.auth import require
from web.db import get_conn, get_redis, settings
from web.media import sign_delivery

bp = Blueprint("api", __name__, url_prefix="/api")


def media_url(sha256: str | None) -> str | None:
    return url_for("media.get", sha256=sha256) if sha256 else None


def with_urls(doc: dict) -> dict:
    """Add asset URLs next to every sha256 of a version board."""
    for task in doc["tasks"]:
        task["asset_url"] = media_url(task["sha256"])
        task["url"] = url_for("api.get_task", task_id=task["id"])
    return doc


def send_fast(outbox_ids: tuple[int, ...] | list[int]) -> None:
    """Enqueue right after commit; Redis trouble leaves the rows to the dispatcher."""
    client = get_redis()
    if outbox_ids and client is not None:
        dispatch.send_now(get_conn(), client, outbox_ids, claim_seconds=settings().dispatch_claim_seconds)


def accepted(saved: Saved, **extra: object) -> Response:
    location = url_for("api.get_version", content_id=saved.content_id, version=saved.version)
    body = {"content_id": saved.content_id, "version": saved.version, "status": "in_progress" if saved.created
            else overview.version(get_conn(), saved.content_id, saved.version)["status"], "status_url": location,
            "content_url": url_for("api.get_content", content_id=saved.content_id),
            "board_url": url_for("ui.board", content_id=saved.content_id, version=saved.version), **extra}
    response = jsonify(body)
    response.status_code = 202
    response.headers["Location"] = location
    if not saved.created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


def _save(content_id: int | None) -> Response:
    body = inputs.json_object()
    key = inputs.idempotency_key()
    base = inputs.base_version(body) if content_id is not None else None
    draft = parse_draft(body)
    lane = lanes.parse_priority(body.get("priority", lanes.INTERACTIVE))   # "bulk": an import, behind editors
    saved = versions.save(get_conn(), draft, settings(), actor=g.principal.owner, content_id=content_id,
                          base_version=base, save_key=key, key_id=g.principal.key_id, lane=lane, send_at_once=True)
    log("saved", content_id=saved.content_id, version=saved.version, created=saved.created, lane=lane,
        outbox_ids=list(saved.outbox_ids))
    send_fast(saved.outbox_ids)
    return accepted(saved)


@bp.get("/contents")
@require("read")
def list_contents():
    limit, offset = inputs.page_args()
    query = inputs.search_query()
    before = inputs.arg_int("before", None, low=1, what="a content id")
    return jsonify(overview.contents_list(get_conn(), limit=limit, offset=offset, query=query, before=before))


@bp.post("/contents")
@require("edit")
def create_content():
    return _save(None)


@bp.put("/contents/<id:content_id>")
@require("edit")
def update_content(content_id: int):
    return _save(content_id)


@bp.get("/contents/<id:content_id>")
@require("read")
def get_content(content_id: int):
    doc = overview.content(get_conn(), content_id)
    doc["versions"] = [{**v, "url": url_for("api.get_version", content_id=content_id, version=v["version"])}
                       for v in doc["versions"]]
    return jsonify(doc)


@bp.get("/contents/<id:content_id>/versions/<ver:version>")
@require("read")
def get_version(content_id: int, version: int):
    doc = with_urls(overview.version(get_conn(), content_id, version))
    doc.pop("blocks")  # the tasks carry their block; the board's block rows are for the UI
    return jsonify(doc)


@bp.post("/contents/<id:content_id>/versions/<ver:version>/approve")
@require("review")
def approve_version(content_id: int, version: int):
    inputs.json_body(required=False)
    approval = review.approve(get_conn(), content_id, version, actor=g.principal.owner,
                              key_id=g.principal.key_id, allow_self=settings().allow_self_approval)
    return jsonify(content_id=approval.content_id, version=approval.version, approved_at=approval.approved_at,
                   approved_by=approval.approved_by,
                   delivery_url=url_for("api.get_delivery", content_id=content_id))


@bp.post("/contents/<id:content_id>/versions/<ver:version>/cancel")
@require("edit")
def cancel_version(content_id: int, version: int):
    inputs.json_body(required=False)
    cancelled = versions.cancel(get_conn(), content_id, version, actor=g.principal.owner)
    location = url_for("api.get_version", content_id=content_id, version=version)
    response = jsonify(content_id=content_id, version=version, cancelled_now=cancelled, status_url=location)
    response.status_code = 202
    response.headers["Location"] = location
    return response


def delivery_doc(content_id: int) -> dict:
    """The approved version's manifest; its media links are signed and expire (web.media)."""
    return sign_delivery(review.delivery(get_conn(), content_id))


@bp.get("/contents/<id:content_id>/delivery")
@require("deliver")
def get_delivery(content_id: int):
    return jsonify(delivery_doc(content_id))
