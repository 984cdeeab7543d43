"""Spend, for people: `GET /api/spend` (today, the caller's team's contents), `GET /api/contents/<id>/spend`,
and the page `/spend` (today, or one content with `?content=ID`).

Calls, reuses, replays and cost from the call ledger, today's bookings against each
provider's daily budget, tasks paused by a budget, and every duplicate charge with who
consented to it. Reading needs the `read` permission, like the rest of the board.
"""

from __future__ import annotations

from flask import Blueprint, g, jsonify, render_template

from pipeline import spend, teams
from web import inputs
from web.auth import require
from web.db import get_conn, settings

api = Blueprint("spend", __name__)   # under /api
ui = Blueprint("spend", __name__)


@api.get("/spend")
@require("read")
def spend_today():
    return jsonify(spend.report(get_conn(), settings(), team=g.principal.scope))


@api.get("/contents/<id:content_id>/spend")
@require("read")
def spend_of_content(content_id: int):
    return jsonify(spend.report(get_conn(), settings(), content_id, team=g.principal.scope))


@ui.get("/spend")
def spend_page():
    content_id = inputs.arg_int("content", None, low=1, what="a content id")
    if content_id is not None:   # NotFound for an unknown content, or another team's
        teams.check(get_conn(), g.user, content_id=content_id)
    return render_template("spend.html", s=spend.report(get_conn(), settings(), content_id, team=g.user.scope))
