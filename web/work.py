"""New work from the views of every area: sent to the workers right after commit, and the 202 answer of a save.

A save, a retry, a rerun or a regeneration commits its outbox rows first; `send_fast` then enqueues them
at once, and Redis trouble leaves them to the dispatcher, which sends whatever is still unsent.
"""

from __future__ import annotations

from flask import Response, jsonify, url_for

from pipeline import dispatch, overview
from pipeline.versions import Saved
from web.db import get_conn, get_redis, settings


def send_fast(outbox_ids: tuple[int, ...] | list[int]) -> None:
    """Enqueue right after commit; Redis trouble leaves the rows to the dispatcher."""
    client = get_redis()
    if outbox_ids and client is not None:
        dispatch.send_now(get_conn(), client, outbox_ids, claim_seconds=settings().dispatch_claim_seconds)


def accepted(saved: Saved, **extra: object) -> Response:
    """202 for a saved version: where to watch it (Location), its content and board; a replayed save says so."""
    location = url_for("api.contents.get_version", content_id=saved.content_id, version=saved.version)
    body = {"content_id": saved.content_id, "version": saved.version, "status": "in_progress" if saved.created
            else overview.version(get_conn(), saved.content_id, saved.version)["status"], "status_url": location,
            "content_url": url_for("api.contents.get_content", content_id=saved.content_id),
            "board_url": url_for("ui.contents.board", content_id=saved.content_id, version=saved.version), **extra}
    response = jsonify(body)
    response.status_code = 202
    response.headers["Location"] = location
    if not saved.created:
        response.headers["Idempotent-Replayed"] = "true"
    return response
