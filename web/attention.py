"""What needs a person, across every content (pipeline.attention), with its bulk retry and resolve, and the bulk
lane's pause (admins); the JSON API and the editors' page.
"""

from __future__ import annotations

from flask import Blueprint, flash, g, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext, ngettext

from pipeline import attention, pauses
from pipeline.core.errors import Conflict, InvalidInput
from pipeline.core.records import MAX_NOTE
from pipeline.core import kinds
from web import inputs
from web.auth import require
from web.db import get_conn, settings
from web.pages import REFUSALS, form_note, need
from web.work import send_fast
from web.words import refusal

api = Blueprint("attention", __name__)   # under /api
ui = Blueprint("attention", __name__)


def attention_filters() -> dict:
    return {"problem": request.args.get("problem") or None, "kind": request.args.get("kind") or None,
            "content_id": inputs.arg_int("content_id", None, low=1, what="a content id")}


# -- API --------------------------------------------------------------------------------------

@api.get("/attention")
@require("read")
def attention_list():
    limit, offset = inputs.page_args()
    doc = attention.tasks(get_conn(), team=g.principal.scope, **attention_filters(), limit=limit, offset=offset)
    for item in doc["items"]:
        item["url"] = url_for("api.tasks.get_task", task_id=item["id"])
    return jsonify(doc)


@api.post("/attention/retry")
@require("edit")
def attention_retry():
    ids = attention.check_ids(inputs.json_object().get("task_ids"))
    bulk = attention.retry_failed(get_conn(), ids, settings(), by=g.principal)
    send_fast(bulk.outbox_ids)
    return jsonify(bulk.as_dict())


@api.post("/attention/resolve")
@require("edit")
def attention_resolve():
    body = inputs.json_object()
    ids = attention.check_ids(body.get("task_ids"))
    note = inputs.text(body, "note", MAX_NOTE)
    return jsonify(attention.resolve_unknown(get_conn(), ids, note, by=g.principal).as_dict())


@api.get("/lanes/bulk")
@require("read")
def bulk_lane():
    return jsonify(pauses.state(get_conn()))


@api.post("/lanes/bulk/pause")
@require("admin")
def bulk_lane_pause():
    pauses.pause(get_conn(), by=g.principal)
    return jsonify(pauses.state(get_conn()))


@api.post("/lanes/bulk/resume")
@require("admin")
def bulk_lane_resume():
    resumed = pauses.resume(get_conn(), by=g.principal)
    return jsonify({**pauses.state(get_conn()), "tasks_moved": resumed["tasks_moved"]})


# -- pages ------------------------------------------------------------------------------------

@ui.get("/attention")
def attention_page():
    limit, offset = inputs.page_args()
    try:
        doc = attention.tasks(get_conn(), team=g.user.scope, **attention_filters(), limit=limit, offset=offset)
    except InvalidInput as exc:
        flash(refusal(gettext("Filter ignored"), exc), "error")
        doc = attention.tasks(get_conn(), team=g.user.scope, limit=limit, offset=offset)
    return render_template("attention.html", a=doc, problems=attention.PROBLEMS, kinds=kinds.names(),
                           lane=pauses.state(get_conn()))


@ui.post("/attention/bulk-lane")
def bulk_lane_post():
    need("admin")
    action = request.form.get("action")
    try:
        if action == "pause":
            pauses.pause(get_conn(), by=g.user)
            flash(gettext("The bulk lane is paused: no import task starts until it is resumed; calls already "
                          "running finish, and imports are still accepted."), "ok")
        elif action == "resume":
            moved = pauses.resume(get_conn(), by=g.user)["tasks_moved"]
            flash(ngettext("The bulk lane runs again; %(n)s waiting task had its deadline moved on by the pause.",
                           "The bulk lane runs again; %(n)s waiting tasks had their deadlines moved on by the pause.",
                           moved, n=moved), "ok")
        else:
            flash(gettext("Nothing changed: choose pause or resume."), "error")
    except Conflict as exc:
        flash(refusal(gettext("Nothing changed"), exc), "error")
    return redirect(url_for("ui.attention.attention_page"), code=303)


@ui.post("/attention")
def attention_bulk():
    need("edit")
    ids = inputs.id_list(request.form.getlist("task_id"), "task_id")
    action = request.form.get("action")
    back = redirect(request.form.get("back") if (request.form.get("back") or "").startswith("/attention")
                    else url_for("ui.attention.attention_page"), code=303)
    if not ids:
        flash(gettext("Select the tasks first."), "error")
        return back
    try:
        ids = attention.check_ids(ids)
        if action == "retry":
            bulk = attention.retry_failed(get_conn(), ids, settings(), by=g.user)
            send_fast(bulk.outbox_ids)
        elif action == "resolve" and form_note():
            bulk = attention.resolve_unknown(get_conn(), ids, form_note(), by=g.user)
        else:
            flash(gettext("Say why you mark them as failed (for example what the provider's dashboard shows)."),
                  "error")
            return back
    except REFUSALS as exc:
        flash(refusal(gettext("Nothing changed"), exc), "error")
        return back
    flash(ngettext("%(done)s task changed; %(refused)s left as they were (an unknown outcome is retried only on "
                   "its own page, with your consent).", "%(done)s tasks changed; %(refused)s left as they were (an "
                   "unknown outcome is retried only on its own page, with your consent).", len(bulk.done),
                   done=len(bulk.done), refused=len(bulk.refused)), "ok")
    return back
