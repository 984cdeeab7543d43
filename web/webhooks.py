"""Webhook endpoints, for admins: the page that lists and registers them (`/webhooks`) and one endpoint's page
(`/webhooks/<id>`: its messages and their attempts, send again, rotate its secret, disable, enable, remove).

Views parse the form and call pipeline.webhooks. A secret is shown once, in the answer to the form that made it
(registration, rotation), never stored, flashed or redirected with.
"""

from __future__ import annotations

from flask import Blueprint, flash, g, redirect, render_template, request, url_for
from flask_babel import gettext

from pipeline import teams, webhooks
from pipeline.core.webhooks import EVENT_TYPES
from web import inputs
from web.db import get_conn, settings
from web.pages import REFUSALS, need
from web.words import refusal

ui = Blueprint("webhooks", __name__)
OVERLAP_HOURS = 24


@ui.get("/webhooks")
def webhooks_page():
    need("admin")
    return _list()


def _list(status: int = 200, form: dict | None = None):
    return render_template("webhooks.html", endpoints=webhooks.endpoints(get_conn()), teams=teams.list_teams(get_conn()),
                           event_types=EVENT_TYPES, form=form or {}), status


@ui.post("/webhooks")
def webhooks_add():
    need("admin")
    form = {"team": request.form.get("team", ""), "url": (request.form.get("url") or "").strip(),
            "events": request.form.getlist("events"), "description": request.form.get("description", "")}
    try:
        made = webhooks.add(get_conn(), settings(), team=form["team"], url=form["url"], events=form["events"] or None,
                            by=g.user, description=form["description"])
    except REFUSALS as exc:
        flash(refusal(gettext("Nothing registered"), exc), "error")
        return _list(422, form)
    return _page(made.endpoint["id"], secret=made.secret)


@ui.get("/webhooks/<id:endpoint_id>")
def endpoint_page(endpoint_id: int):
    need("admin")
    return _page(endpoint_id)


def _page(endpoint_id: int, secret: str | None = None):
    return render_template("webhook.html", e=webhooks.endpoint(get_conn(), endpoint_id), secret=secret,
                           overlap_hours=OVERLAP_HOURS)


@ui.post("/webhooks/<id:endpoint_id>")
def endpoint_post(endpoint_id: int):
    need("admin")
    action = request.form.get("action")
    back = redirect(url_for("ui.webhooks.endpoint_page", endpoint_id=endpoint_id), code=303)
    try:
        if action == "rotate":
            hours = inputs.whole(request.form.get("overlap_hours") or "0", "overlap_hours", low=0, high=720)
            made = webhooks.rotate(get_conn(), settings(), endpoint_id, overlap_seconds=hours * 3600)
            return _page(endpoint_id, secret=made.secret)
        if action == "disable":
            dead = webhooks.disable(get_conn(), endpoint_id, by=g.user, reason=f"disabled by {g.user.owner}")
            flash(gettext("The endpoint is disabled; %(n)s waiting messages are dead (send them again once it is "
                          "enabled).", n=dead), "ok")
        elif action == "enable":
            webhooks.enable(get_conn(), endpoint_id)
            flash(gettext("The endpoint receives new messages again."), "ok")
        elif action == "remove":
            webhooks.remove(get_conn(), endpoint_id)
            flash(gettext("The endpoint and the history of its messages are removed."), "ok")
            return redirect(url_for("ui.webhooks.webhooks_page"), code=303)
        elif action in ("send-again", "send-dead"):
            ids = (None if action == "send-dead"
                   else inputs.id_list(request.form.getlist("delivery_id"), "delivery_id") or [0])
            again = webhooks.send_again(get_conn(), endpoint_id, ids)
            flash(gettext("%(n)s messages will be sent again, with their webhook-id of before.", n=len(again)), "ok")
        else:
            flash(gettext("Nothing changed: choose an action."), "error")
    except REFUSALS as exc:
        flash(refusal(gettext("Nothing changed"), exc), "error")
    return back
