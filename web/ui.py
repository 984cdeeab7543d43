"""The editors' pages: sign in, contents list, editor, version board, task timeline, delivery.

Server-rendered; the only script (a static file: the Content-Security-Policy allows no
inline script or style) polls the board while work runs and helps edit blocks. Every
page needs a signed-in key (a server-side session, web.sessions); every POST carries the
session's CSRF token (checked before any view runs). State changes live in web.ui_actions.
The delivery page shows the same signed, expiring media links as the API's manifest.
"""

from __future__ import annotations

import psycopg
from flask import Blueprint, abort, g, make_response, redirect, render_template, request, url_for
from flask_babel import gettext
from werkzeug.wrappers import Response

from pipeline import demo, keys, overview, pauses, review, signins
from pipeline.core.content import LIMITS, download_name
from pipeline.core.errors import Conflict
from pipeline.log import log
from web import i18n
from web.auth import check_csrf, csrf_token, session_principal, sign_in, sign_out
from web.db import get_conn, settings
from web.inputs import MAX_OFFSET, arg_int, search_query
from web.media import sign_delivery

bp = Blueprint("ui", __name__)
PUBLIC = {"ui.signin", "ui.signin_post"}
PAGE_SIZE = 50


@bp.before_request
def guard() -> Response | None:
    g.user = session_principal()
    if request.method == "POST":
        check_csrf()
    if g.user is None and request.endpoint not in PUBLIC:
        return redirect(url_for("ui.signin", next=request.full_path.rstrip("?") if request.method == "GET" else None))
    return None


@bp.app_context_processor
def template_globals() -> dict:
    return {"csrf_token": csrf_token, "user": g.get("user"), "demo_mode": settings().demo_mode,
            "bulk_pause": bulk_pause}


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


def _safe_next(target: str | None) -> str:
    # only local paths: an open redirect would let a link send a signed-in editor anywhere
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return url_for("ui.contents")


@bp.get("/signin")
def signin():
    return render_template("signin.html", next=request.args.get("next", ""))


@bp.post("/signin")
def signin_post():
    address = request.remote_addr or ""
    wait = signins.throttled(get_conn(), address)
    if wait:
        log("signin_throttled", address=address)
        response = make_response(render_template("signin.html", error=gettext(
            "Too many failed sign-ins from your address; try again in a few minutes."),
            next=request.form.get("next", "")), 429)
        response.headers["Retry-After"] = str(wait)
        return response
    principal = keys.authenticate(get_conn(), request.form.get("api_key", "").strip())
    if principal is None or not principal.may("read"):
        signins.failed(get_conn(), address)
        log("signin_failed", address=address, reason="unknown key" if principal is None else "role without read")
        error = (gettext("That key is unknown or revoked.") if principal is None else
                 gettext("That key may only fetch deliveries through the API; sign in with an editor, reviewer or "
                         "admin key."))
        return render_template("signin.html", error=error, next=request.form.get("next", "")), 401
    log("signin", address=address, owner=principal.owner, key_id=principal.key_id)
    signins.sweep(get_conn())
    sign_in(principal)
    i18n.remember(request.form)
    return redirect(_safe_next(request.form.get("next")), code=303)


@bp.post("/signout")
def signout():
    sign_out()
    return redirect(url_for("ui.signin"), code=303)


@bp.get("/")
def contents():
    offset = arg_int("offset", 0, low=0, high=MAX_OFFSET)
    page = overview.contents_list(get_conn(), limit=PAGE_SIZE, offset=offset, query=search_query())
    return render_template("contents.html", page=page, themes=demo.themes(), scenarios=list(demo.SCENARIOS))


@bp.get("/contents/new")
def new_content():
    need("edit")
    blank = {"title": "", "locale": "zh-CN", "theme": "", "blocks": [{"key": "b1", "text": "", "image_prompt": ""}]}
    return render_template("editor.html", form=blank, content=None, limits=LIMITS)


@bp.get("/contents/<id:content_id>")
def content(content_id: int):
    doc = overview.content(get_conn(), content_id)
    return redirect(url_for("ui.board", content_id=content_id, version=doc["current_version"]))


@bp.get("/contents/<id:content_id>/edit")
def edit_content(content_id: int):
    need("edit")
    doc = overview.content(get_conn(), content_id)
    form = {"title": doc["title"], "locale": doc["locale"], "theme": doc["theme"] or "",
            "blocks": doc["blocks"], "base_version": doc["current_version"]}
    return render_template("editor.html", form=form, content=doc, limits=LIMITS)


def _board(content_id: int, version: int) -> dict:
    doc = overview.version(get_conn(), content_id, version)
    doc["download_name"] = download_name(doc["title"], version)
    return doc


@bp.get("/contents/<id:content_id>/versions/<ver:version>")
def board(content_id: int, version: int):
    doc = _board(content_id, version)
    others = overview.content(get_conn(), content_id)["versions"]
    return render_template("board.html", v=doc, versions=others)


@bp.get("/contents/<id:content_id>/versions/<ver:version>/live")
def board_live(content_id: int, version: int):
    """The board's changing part, for the page's 2-second polling while work runs."""
    return render_template("_board.html", v=_board(content_id, version))


@bp.get("/tasks/<id:task_id>")
def task(task_id: int):
    doc = overview.task(get_conn(), task_id, settings())
    return render_template("task.html", t=doc)


@bp.get("/contents/<id:content_id>/delivery")
def delivery(content_id: int):
    head = overview.content(get_conn(), content_id)
    try:
        manifest, blockers = sign_delivery(review.delivery(get_conn(), content_id)), None
    except Conflict as exc:
        if exc.code != "not_deliverable":
            raise
        manifest, blockers = None, exc.details
    return render_template("delivery.html", content=head, manifest=manifest, blockers=blockers)
