"""One task: its timeline, and what an editor may do to it (retry, rerun from its dead letter, mark an unknown
outcome as failed, regenerate its picture or narration with a confirmation that names the cost); the JSON API
and the editors' pages.
"""

from __future__ import annotations

from flask import Blueprint, flash, g, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext

from pipeline import overview, regenerate, rerun, review
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput
from pipeline.core.records import MAX_NOTE
from pipeline.core.rerun import MAX_EXTENSION_SECONDS
from web import inputs
from web.auth import require
from web.db import get_conn, settings
from web.media import media_url
from web.pages import REFUSALS, back_to_board, form_note, need
from web.work import accepted, send_fast
from web.words import refusal

api = Blueprint("tasks", __name__)   # under /api
ui = Blueprint("tasks", __name__)


# -- API --------------------------------------------------------------------------------------

@api.get("/tasks/<id:task_id>")
@require("read")
def get_task(task_id: int):
    doc = overview.task(get_conn(), task_id, settings())
    doc["asset_url"] = media_url(doc["sha256"])
    doc["version_url"] = url_for("api.contents.get_version", content_id=doc["content_id"], version=doc["version"])
    return jsonify(doc)


@api.post("/tasks/<id:task_id>/retry")
@require("edit")
def retry_task(task_id: int):
    body = inputs.json_object(required=False)
    accept = inputs.flag(body, "accept_duplicate_risk")
    reopened = review.retry(get_conn(), task_id, settings(), by=g.principal, accept_duplicate_risk=accept)
    send_fast(reopened.outbox_ids)
    location = url_for("api.tasks.get_task", task_id=task_id)
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


@api.post("/tasks/<id:task_id>/rerun")
@require("edit")
def rerun_task(task_id: int):
    return _rerun(task_id)


@api.post("/tasks/<id:task_id>/replay")
@require("edit")
def replay_task(task_id: int):
    """The rerun's route under its earlier name, answering with the earlier names too (CHANGELOG.md)."""
    return _rerun(task_id, earlier_names=True)


def _rerun(task_id: int, *, earlier_names: bool = False):
    """Rerun the task; with `earlier_names`, the answer also has replay_id and replay_of."""
    body = inputs.json_object()
    why = inputs.text(body, "why", MAX_NOTE)
    done = rerun.rerun(get_conn(), task_id, settings(), by=g.principal, why=why,
                       extend_deadline_seconds=_extension(body))
    send_fast(done.outbox_ids)
    location = url_for("api.tasks.get_task", task_id=task_id)
    answer = {"task_id": task_id, "rerun_id": done.rerun_id, "rerun_of": done.rerun_of, "status": done.status,
              "first_attempt": done.first_attempt, "max_attempts": done.max_attempts,
              "deadline_before": done.deadline_before, "deadline_after": done.deadline_after, "status_url": location}
    if earlier_names:
        answer |= {"replay_id": done.rerun_id, "replay_of": done.rerun_of}
    response = jsonify(answer)
    response.status_code = 202
    response.headers["Location"] = location
    return response


@api.post("/tasks/<id:task_id>/resolve")
@require("edit")
def resolve_task(task_id: int):
    body = inputs.json_object()
    if body.get("outcome") != "failed":
        raise InvalidInput("outcome must be \"failed\": an unknown task can be closed as failed here; "
                           "a success is recorded only from the provider's own answer", field="outcome")
    note = inputs.text(body, "note", MAX_NOTE)
    row = review.resolve_failed(get_conn(), task_id, note, by=g.principal)
    return jsonify(task_id=task_id, status=row["status"], last_error=row["last_error"],
                   status_url=url_for("api.tasks.get_task", task_id=task_id))


@api.post("/tasks/<id:task_id>/regenerate")
@require("edit")
def regenerate_task(task_id: int):
    body = inputs.json_object(required=False)
    accept = inputs.flag(body, "accept_new_charge")
    reason = inputs.text(body, "reason", MAX_NOTE) if accept or "reason" in body else ""
    made = regenerate.regenerate(get_conn(), task_id, settings(), by=g.principal, reason=reason,
                                 accept_new_charge=accept)
    send_fast(made.saved.outbox_ids)
    return accepted(made.saved, task_id=made.task_id, replaced_task_id=task_id, replaced_sha256=made.replaced_sha256,
                    estimated_cost=made.estimated_cost,
                    task_url=url_for("api.tasks.get_task", task_id=made.task_id))


# -- pages ------------------------------------------------------------------------------------

@ui.get("/tasks/<id:task_id>")
def task(task_id: int):
    doc = overview.task(get_conn(), task_id, settings())
    return render_template("task.html", t=doc)


@ui.get("/tasks/<id:task_id>/live")
def task_live(task_id: int):
    """The task page's changing part, for the page's 2-second polling until the task is settled."""
    return render_template("_task_live.html", t=overview.task(get_conn(), task_id, settings()))


def _task_redirect(task_id: int):
    back = request.form.get("back") or ""
    if back == "task":
        return redirect(url_for("ui.tasks.task", task_id=task_id), code=303)
    if back == "/attention" or back.startswith("/attention?"):   # the attention list's own retry button
        return redirect(back, code=303)
    return back_to_board(*overview.task_place(get_conn(), task_id))


@ui.post("/tasks/<id:task_id>/retry")
def retry(task_id: int):
    need("edit")
    accept = request.form.get("accept_duplicate_risk") == "yes"
    try:
        reopened = review.retry(get_conn(), task_id, settings(), by=g.user, accept_duplicate_risk=accept)
        send_fast(reopened.outbox_ids)
        flash(gettext("Task %(task)s will run again (attempt budget now %(attempts)s), with the duplicate-charge "
                      "risk accepted by you.", task=task_id, attempts=reopened.max_attempts) if accept else
              gettext("Task %(task)s will run again (attempt budget now %(attempts)s).", task=task_id,
                      attempts=reopened.max_attempts), "ok")
    except (Conflict, CapacityExceeded) as exc:
        flash(refusal(gettext("Not retried"), exc), "error")
    return _task_redirect(task_id)


EXTENSIONS = {"": None, "1h": 3600, "1d": 86_400}   # the rerun form's deadline choices


@ui.post("/tasks/<id:task_id>/replay")   # its earlier name, for a page loaded before the rename
@ui.post("/tasks/<id:task_id>/rerun")    # the first rule added, the one url_for builds
def rerun_post(task_id: int):
    need("edit")
    why = request.form.get("why", "").strip()
    extension = request.form.get("extend", "")
    if not why or extension not in EXTENSIONS:
        flash(gettext("Say why you rerun it; the reason is kept with its dead letter."), "error")
        return _task_redirect(task_id)
    try:
        inputs.check_storable(why, "why")
        done = rerun.rerun(get_conn(), task_id, settings(), by=g.user, why=why[:MAX_NOTE],
                           extend_deadline_seconds=EXTENSIONS[extension])
        send_fast(done.outbox_ids)
        flash(gettext("Task %(task)s is rerun from attempt %(attempt)s; its dead letter is kept.",
                      task=task_id, attempt=done.first_attempt), "ok")
    except (Conflict, CapacityExceeded, InvalidInput) as exc:
        flash(refusal(gettext("Not rerun"), exc), "error")
    return _task_redirect(task_id)


@ui.post("/tasks/<id:task_id>/resolve")
def resolve(task_id: int):
    need("edit")
    note = request.form.get("note", "").strip()
    if not note:
        flash(gettext("Say why you mark it as failed (for example what the provider's dashboard shows)."), "error")
        return _task_redirect(task_id)
    try:
        inputs.check_storable(note, "note")
        review.resolve_failed(get_conn(), task_id, note[:MAX_NOTE], by=g.user)
        flash(gettext("Task %(task)s is marked as failed.", task=task_id), "ok")
    except (Conflict, InvalidInput) as exc:
        flash(refusal(gettext("Not changed"), exc), "error")
    return _task_redirect(task_id)


@ui.get("/tasks/<id:task_id>/regenerate")
def regenerate_page(task_id: int):
    need("edit")
    task = overview.task_brief(get_conn(), task_id)
    return render_template("regenerate.html", t=task, cost=regenerate.estimated_cost(settings(), task["kind"]))


@ui.post("/tasks/<id:task_id>/regenerate")
def regenerate_post(task_id: int):
    need("edit")
    reason = form_note("reason")
    accept = request.form.get("accept_new_charge") == "yes"
    if not accept or not reason:
        flash(gettext("Tick the box to accept a new charge, and say why you want a new one."), "error")
        return redirect(url_for("ui.tasks.regenerate_page", task_id=task_id), code=303)
    try:
        made = regenerate.regenerate(get_conn(), task_id, settings(), by=g.user, reason=reason,
                                     accept_new_charge=True)
    except REFUSALS as exc:
        flash(refusal(gettext("Not regenerated"), exc), "error")
        return redirect(url_for("ui.tasks.regenerate_page", task_id=task_id), code=303)
    send_fast(made.saved.outbox_ids)
    flash(gettext("Version %(version)s is being made with a new call for this block; the earlier asset is kept "
                  "on version %(old)s.", version=made.saved.version, old=made.saved.version - 1), "ok")
    return back_to_board(made.saved.content_id, made.saved.version)
