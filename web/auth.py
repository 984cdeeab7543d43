"""Who is calling, and may they: API keys for /api/, a server-side session for the UI, CSRF for forms,
and the sign-in and sign-out pages.

API calls carry `X-API-Key`: 401 when it is missing, unknown or revoked; 403 when the
key's role lacks the permission (pipeline.core.principal.PERMISSIONS). The UI signs in once with
a key; the session lives in the database (web.sessions) and its cookie holds only a
random token, so sign-out, revocation and the session timeouts end it for good. Every
UI form carries the session's CSRF token (before sign-in, one bound to a cookie nonce);
a POST without the right one is refused with 400. Failed sign-ins are throttled by
address (pipeline.signins).
"""

from __future__ import annotations

import hmac
import secrets
from functools import wraps
from typing import Callable

from flask import Blueprint, abort, g, make_response, redirect, render_template, request, url_for
from flask_babel import gettext

from pipeline import keys, signins, teams
from pipeline.core.principal import Principal
from pipeline.core.teams import DEFAULT_TEAM
from pipeline.log import log
from web import contract, i18n, sessions
from web.db import get_conn, settings
from web.errors import Problem
from web.inputs import safe_next
from web.security import direct_loopback

HEADER = "X-API-Key"
ui = Blueprint("auth", __name__)


def _forbidden(principal: Principal, permission: str) -> Problem:
    allowed = " or ".join(keys.roles_allowed(permission))
    return Problem(403, "forbidden", f"this action needs the {allowed} role; the key of {principal.owner} "
                                     f"has the {principal.role} role")


# Demo mode only: the seed call of the README works from the machine itself without a key.
DEMO_PRINCIPAL = Principal(key_id=0, owner="demo (no key, loopback)", role="editor", team=DEFAULT_TEAM)


def _loopback_demo() -> bool:
    """The keyless demo door: demo mode, a JSON body (a cross-site page cannot send one without a
    CORS preflight we never grant), and a direct call from this machine (web.security.direct_loopback)."""
    return settings().demo_mode and request.mimetype == "application/json" and direct_loopback()


def api_principal(permission: str, *, demo_without_key: bool = False) -> Principal:
    token = request.headers.get(HEADER)
    if not token and demo_without_key and _loopback_demo():
        return DEMO_PRINCIPAL
    if not token:
        door = (" (the keyless demo door opens only for a JSON body sent directly from this machine: loopback "
                "address and Host, no proxy headers)") if demo_without_key and settings().demo_mode else ""
        raise Problem(401, "unauthorized", f"send your API key in the {HEADER} header; `bin/keys create` makes one"
                      + door)
    principal = keys.authenticate(get_conn(), token)
    if principal is None:
        raise Problem(401, "unauthorized", "this API key is unknown or revoked; ask an admin for a new one")
    if not principal.may(permission):
        raise _forbidden(principal, permission)
    return principal


def require(permission: str, *, demo_without_key: bool = False) -> Callable:
    """Decorate an API view: the caller's key must grant `permission`; the view finds it in g.principal.

    `demo_without_key`: in demo mode, a keyless JSON call made directly from this machine acts as
    an editor named "demo (no key, loopback)" (demo jobs only; DEMO_MODE is off unless set).
    Then the caller's team must see what the route names (check_team), and the request must keep to the OpenAPI
    document (web.contract).
    """
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapped(*args, **kwargs):
            g.principal = api_principal(permission, demo_without_key=demo_without_key)
            check_team(g.principal)
            contract.check_request()
            return view(*args, **kwargs)
        wrapped.permission = permission
        return wrapped
    return decorate


def check_team(principal: Principal) -> None:
    """Before any view: the content or task the route names must be one the caller's team sees (pipeline.teams:
    otherwise the 404 of a missing one). Every route that names one names it `content_id` or `task_id`."""
    args = request.view_args or {}
    if "content_id" in args or "task_id" in args:
        changes = None if request.method in ("GET", "HEAD") else f"{request.method} {request.path}"
        teams.check(get_conn(), principal, content_id=args.get("content_id"), task_id=args.get("task_id"),
                    changes=changes)


# -- UI session -------------------------------------------------------------------------------

def session_principal() -> Principal | None:
    """The key of this request's live UI session, or None (no cookie, ended, expired, key revoked)."""
    return sessions.current().principal


def csrf_token() -> str:
    sess = sessions.current()
    if sess.principal is None:
        return sessions.signin_csrf(create=True)
    token = sess.get("csrf")
    if not token:
        token = sess["csrf"] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Refuse a state-changing UI request whose form token does not match the session's."""
    sent = request.form.get("csrf_token", "")
    sess = sessions.current()
    expected = sess.get("csrf", "") if sess.principal else sessions.signin_csrf(create=False)
    if not expected or not hmac.compare_digest(str(sent).encode(), str(expected).encode()):
        abort(400, description="the form's security token is missing or stale; reload the page and try again")


# -- sign-in pages ----------------------------------------------------------------------------

@ui.get("/signin")
def signin():
    return render_template("signin.html", next=request.args.get("next", ""))


@ui.post("/signin")
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
    sessions.start(principal)
    i18n.remember(request.form)
    return redirect(safe_next(request.form.get("next")), code=303)


@ui.post("/signout")
def signout():
    sessions.end()
    return redirect(url_for("ui.auth.signin"), code=303)
