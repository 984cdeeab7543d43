"""What the editors' pages of every area share: the sign-in guard, the template globals, the permission check,
the note a form sends, and the way back to a version's board.

Pages are server-rendered; the only script (a static file: the Content-Security-Policy allows no
inline script or style) polls the board while work runs and helps edit blocks. Every page needs a
signed-in key (a server-side session, web.sessions); every POST carries the session's CSRF token,
checked by `guard` before any view runs. A form post parses the form, calls `pipeline` and redirects
(303) to the page that shows the result, with a flash message in words; refusals an editor can act
on (`REFUSALS`) come back as messages (web.words.refusal), not errors.
"""

from __future__ import annotations

import psycopg
from flask import abort, g, redirect, request, url_for
from werkzeug.wrappers import Response

from pipeline.core import kinds
from pipeline import keys, pauses
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound
from pipeline.core.records import MAX_NOTE
from web.auth import check_csrf, check_team, csrf_token, session_principal
from web.db import get_conn, settings
from web.inputs import check_storable

PUBLIC = {"ui.auth.signin", "ui.auth.signin_post"}
REFUSALS = (Conflict, CapacityExceeded, KeyLimitReached, InvalidInput, NotFound)


def guard() -> Response | None:
    """Before every page: who is signed in (g.user), the CSRF token of a POST, and sign-in first for anyone else."""
    g.user = session_principal()
    if request.method == "POST":
        check_csrf()
    if g.user is None and request.endpoint not in PUBLIC:
        return redirect(url_for("ui.auth.signin",
                                next=request.full_path.rstrip("?") if request.method == "GET" else None))
    if g.user is not None:
        check_team(g.user)
    return None


def template_globals() -> dict:
    return {"csrf_token": csrf_token, "user": g.get("user"), "demo_mode": settings().demo_mode,
            "bulk_pause": bulk_pause, "kind_of": kinds.get}


def bulk_pause() -> dict | None:
    """The bulk lane's open pause, for the banner every signed-in page shows; None also when PostgreSQL cannot
    say (an error page must still render)."""
    try:
        return pauses.current(get_conn())
    except psycopg.Error:
        return None


def need(permission: str) -> None:
    if not g.user.may(permission):
        allowed = " or ".join(keys.roles_allowed(permission))
        abort(403, description=f"this needs the {allowed} role; you are signed in as {g.user.owner} "
                               f"({g.user.role})")


def form_note(field: str = "note") -> str:
    """A note the form sends (a reason, a review note), trimmed to MAX_NOTE; it must be storable text."""
    note = request.form.get(field, "").strip()[:MAX_NOTE]
    check_storable(note, field)
    return note


def back_to_board(content_id: int, version: int) -> Response:
    return redirect(url_for("ui.contents.board", content_id=content_id, version=version), code=303)
