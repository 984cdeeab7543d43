"""Reviewing a version: compare it with another, approve it, reject it or ask for changes, withdraw an approval;
the JSON API and the reviewers' pages.
"""

from __future__ import annotations

from flask import Blueprint, flash, g, jsonify, render_template, request, url_for
from flask_babel import gettext

from pipeline import overview, review
from pipeline.core.errors import Conflict, InvalidInput
from pipeline.core.records import MAX_NOTE
from web import inputs
from web.auth import require
from web.db import get_conn, settings
from web.pages import REFUSALS, back_to_board, form_note, need
from web.words import refusal

api = Blueprint("review", __name__)   # under /api
ui = Blueprint("review", __name__)


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
    if new == 1 and not request.args.get("from"):
        raise Conflict(f"content {content_id} has no version before version 1 to compare it with; name both versions "
                       "with from= and to=", code="no_earlier_version")
    old = version_arg("from", new - 1)
    return overview.versions_compared(get_conn(), content_id, old, new)


# -- API --------------------------------------------------------------------------------------

@api.get("/contents/<id:content_id>/compare")
@require("read")
def compare_versions(content_id: int):
    return jsonify(compared(content_id))


@api.post("/contents/<id:content_id>/versions/<ver:version>/approve")
@require("review")
def approve_version(content_id: int, version: int):
    inputs.json_body(required=False)
    approval = review.approve(get_conn(), content_id, version, by=g.principal,
                              allow_self=settings().allow_self_approval)
    return jsonify(content_id=approval.content_id, version=approval.version, approved_at=approval.approved_at,
                   approved_by=approval.approved_by,
                   delivery_url=url_for("api.contents.get_delivery", content_id=content_id))


def _decision(content_id: int, version: int, decision: str):
    note = inputs.text(inputs.json_object(), "note", MAX_NOTE)
    done = review.decide(get_conn(), content_id, version, decision, note, by=g.principal)
    return jsonify({**done, "status_url": url_for("api.contents.get_version", content_id=content_id,
                                                  version=version)})


@api.post("/contents/<id:content_id>/versions/<ver:version>/reject")
@require("review")
def reject_version(content_id: int, version: int):
    return _decision(content_id, version, "rejected")


@api.post("/contents/<id:content_id>/versions/<ver:version>/request-changes")
@require("review")
def request_changes(content_id: int, version: int):
    return _decision(content_id, version, "changes_requested")


@api.post("/contents/<id:content_id>/versions/<ver:version>/withdraw")
@require("review")
def withdraw_approval(content_id: int, version: int):
    note = inputs.text(inputs.json_object(), "note", MAX_NOTE)
    done = review.withdraw(get_conn(), content_id, version, note, by=g.principal)
    return jsonify({**done, "delivery_url": url_for("api.contents.get_delivery", content_id=content_id)})


# -- pages ------------------------------------------------------------------------------------

@ui.get("/contents/<id:content_id>/compare")
def compare(content_id: int):
    head = overview.content(get_conn(), content_id)
    return render_template("compare.html", c=compared(content_id), content=head)


@ui.post("/contents/<id:content_id>/versions/<ver:version>/approve")
def approve(content_id: int, version: int):
    need("review")
    try:
        review.approve(get_conn(), content_id, version, by=g.user, allow_self=settings().allow_self_approval)
        flash(gettext("Version %(version)s is approved; it is what the delivery serves now.", version=version), "ok")
    except Conflict as exc:
        flash(refusal(gettext("Not approved"), exc), "error")
    return back_to_board(content_id, version)


@ui.post("/contents/<id:content_id>/versions/<ver:version>/decide")
def decide(content_id: int, version: int):
    """Reject, ask for changes, or withdraw the approval, with a note (reviewers)."""
    need("review")
    decision, note = request.form.get("decision", ""), form_note()
    if decision not in ("rejected", "changes_requested", "withdraw"):
        flash(gettext("Choose what to do with this version."), "error")
        return back_to_board(content_id, version)
    if not note:
        flash(gettext("Say why: the note is kept on the version's history."), "error")
        return back_to_board(content_id, version)
    try:
        if decision == "withdraw":
            review.withdraw(get_conn(), content_id, version, note, by=g.user)
            flash(gettext("The approval of version %(version)s is withdrawn; the delivery answers with your note "
                          "until a version is approved.", version=version), "ok")
        else:
            review.decide(get_conn(), content_id, version, decision, note, by=g.user)
            flash(gettext("Version %(version)s is rejected.", version=version) if decision == "rejected" else
                  gettext("Changes are requested for version %(version)s.", version=version), "ok")
    except REFUSALS as exc:
        flash(refusal(gettext("Not changed"), exc), "error")
    return back_to_board(content_id, version)
