"""The editors' pages of the review workflow: compare two versions, regenerate a picture or narration
(with a confirmation that names the cost), reject / ask for changes / withdraw an approval, and the
attention page with its bulk actions and the bulk lane's pause (admins).

Each form post parses the form, calls `pipeline`, and redirects (303) with a flash message in words;
refusals an editor can act on come back as messages, not errors.
"""

from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for
from flask_babel import gettext

from pipeline import attention, overview, pauses, regenerate, review
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound
from pipeline.core.states import KINDS
from pipeline.core.records import MAX_NOTE
from web.api import send_fast
from web.api_review import attention_filters, compared, page_args
from web.db import get_conn, settings
from web.inputs import check_storable, id_list
from web.ui import bp, need
from web.words import refusal

REFUSALS = (Conflict, CapacityExceeded, KeyLimitReached, InvalidInput, NotFound)


def _note(field: str = "note") -> str:
    note = request.form.get(field, "").strip()[:MAX_NOTE]
    check_storable(note, field)
    return note


def _board(content_id: int, version: int):
    return redirect(url_for("ui.board", content_id=content_id, version=version), code=303)


@bp.get("/contents/<id:content_id>/compare")
def compare(content_id: int):
    head = overview.content(get_conn(), content_id)
    return render_template("compare.html", c=compared(content_id), content=head)


@bp.post("/contents/<id:content_id>/versions/<ver:version>/decide")
def decide(content_id: int, version: int):
    """Reject, ask for changes, or withdraw the approval, with a note (reviewers)."""
    need("review")
    decision, note = request.form.get("decision", ""), _note()
    if decision not in ("rejected", "changes_requested", "withdraw"):
        flash(gettext("Choose what to do with this version."), "error")
        return _board(content_id, version)
    if not note:
        flash(gettext("Say why: the note is kept on the version's history."), "error")
        return _board(content_id, version)
    try:
        if decision == "withdraw":
            review.withdraw(get_conn(), content_id, version, note, actor=g.user.owner)
            flash(gettext("The approval of version %(version)s is withdrawn; the delivery answers with your note "
                          "until a version is approved.", version=version), "ok")
        else:
            review.decide(get_conn(), content_id, version, decision, note, actor=g.user.owner)
            flash(gettext("Version %(version)s is rejected.", version=version) if decision == "rejected" else
                  gettext("Changes are requested for version %(version)s.", version=version), "ok")
    except REFUSALS as exc:
        flash(refusal(gettext("Not changed"), exc), "error")
    return _board(content_id, version)


@bp.get("/tasks/<id:task_id>/regenerate")
def regenerate_page(task_id: int):
    need("edit")
    task = overview.task_brief(get_conn(), task_id)
    return render_template("regenerate.html", t=task, cost=regenerate.estimated_cost(settings(), task["kind"]))


@bp.post("/tasks/<id:task_id>/regenerate")
def regenerate_post(task_id: int):
    need("edit")
    reason = _note("reason")
    accept = request.form.get("accept_new_charge") == "yes"
    if not accept or not reason:
        flash(gettext("Tick the box to accept a new charge, and say why you want a new one."), "error")
        return redirect(url_for("ui.regenerate_page", task_id=task_id), code=303)
    try:
        made = regenerate.regenerate(get_conn(), task_id, settings(), actor=g.user.owner, reason=reason,
                                     accept_new_charge=True, key_id=g.user.key_id)
    except REFUSALS as exc:
        flash(refusal(gettext("Not regenerated"), exc), "error")
        return redirect(url_for("ui.regenerate_page", task_id=task_id), code=303)
    send_fast(made.saved.outbox_ids)
    flash(gettext("Version %(version)s is being made with a new call for this block; the earlier asset is kept "
                  "on version %(old)s.", version=made.saved.version, old=made.saved.version - 1), "ok")
    return _board(made.saved.content_id, made.saved.version)


@bp.get("/attention")
def attention_page():
    limit, offset = page_args()
    try:
        doc = attention.tasks(get_conn(), **attention_filters(), limit=limit, offset=offset)
    except InvalidInput as exc:
        flash(refusal(gettext("Filter ignored"), exc), "error")
        doc = attention.tasks(get_conn(), limit=limit, offset=offset)
    return render_template("attention.html", a=doc, problems=attention.PROBLEMS, kinds=KINDS,
                           lane=pauses.state(get_conn()))


@bp.post("/attention/bulk-lane")
def bulk_lane():
    need("admin")
    action = request.form.get("action")
    try:
        if action == "pause":
            pauses.pause(get_conn(), by=g.user.owner)
            flash(gettext("The bulk lane is paused: no import task starts until it is resumed; calls already "
                          "running finish, and imports are still accepted."), "ok")
        elif action == "resume":
            moved = pauses.resume(get_conn(), by=g.user.owner)["tasks_moved"]
            flash(gettext("The bulk lane runs again; %(n)s waiting tasks had their deadlines moved on by the "
                          "pause.", n=moved), "ok")
        else:
            flash(gettext("Nothing changed: choose pause or resume."), "error")
    except Conflict as exc:
        flash(refusal(gettext("Nothing changed"), exc), "error")
    return redirect(url_for("ui.attention_page"), code=303)


@bp.post("/attention")
def attention_bulk():
    need("edit")
    ids = id_list(request.form.getlist("task_id"), "task_id")
    action = request.form.get("action")
    back = redirect(request.form.get("back") if (request.form.get("back") or "").startswith("/attention")
                    else url_for("ui.attention_page"), code=303)
    if not ids:
        flash(gettext("Select the tasks first."), "error")
        return back
    try:
        ids = attention.check_ids(ids)
        if action == "retry":
            bulk = attention.retry_failed(get_conn(), ids, settings(), actor=g.user.owner, key_id=g.user.key_id)
            send_fast(bulk.outbox_ids)
        elif action == "resolve" and _note():
            bulk = attention.resolve_unknown(get_conn(), ids, _note(), actor=g.user.owner)
        else:
            flash(gettext("Say why you mark them as failed (for example what the provider's dashboard shows)."),
                  "error")
            return back
    except REFUSALS as exc:
        flash(refusal(gettext("Nothing changed"), exc), "error")
        return back
    flash(gettext("%(done)s tasks changed; %(refused)s left as they were (an unknown outcome is retried only on "
                  "its own page, with your consent).", done=len(bulk.done), refused=len(bulk.refused)), "ok")
    return back
