"""Who is calling, and may they: API keys for /api/, a signed session for the UI, CSRF for forms.

API calls carry `X-API-Key`: 401 when it is missing, unknown or revoked; 403 when the
key's role lacks the permission (pipeline.keys.PERMISSIONS). The UI signs in once with
a key; the session cookie (signed, HttpOnly, SameSite=Lax) keeps only the key's id,
re-checked on every request so revoking a key signs its sessions out. Every UI form
carries the session's CSRF token; a POST without the right one is refused with 400.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from functools import wraps
from typing import Callable

from flask import abort, g, request, session

from pipeline import keys
from pipeline.keys import Principal
from web.db import get_conn, settings
from web.errors import Problem

HEADER = "X-API-Key"


def _forbidden(principal: Principal, permission: str) -> Problem:
    allowed = " or ".join(keys.roles_allowed(permission))
    return Problem(403, "forbidden", f"this action needs the {allowed} role; the key of {principal.owner} "
                                     f"has the {principal.role} role")


# Demo mode only: the seed call of the README works from the machine itself without a key.
DEMO_PRINCIPAL = Principal(key_id=0, owner="demo (no key, loopback)", role="editor", key_prefix="-")


def _loopback_demo() -> bool:
    address = ipaddress.ip_address(request.remote_addr or "0.0.0.0")
    return settings().demo_mode and address.is_loopback and not request.headers.get("X-Forwarded-For")


def api_principal(permission: str, *, demo_without_key: bool = False) -> Principal:
    token = request.headers.get(HEADER)
    if not token and demo_without_key and _loopback_demo():
        return DEMO_PRINCIPAL
    if not token:
        raise Problem(401, "unauthorized", f"send your API key in the {HEADER} header; `bin/keys create` makes one")
    principal = keys.authenticate(get_conn(), token)
    if principal is None:
        raise Problem(401, "unauthorized", "this API key is unknown or revoked; ask an admin for a new one")
    if not principal.may(permission):
        raise _forbidden(principal, permission)
    return principal


def require(permission: str, *, demo_without_key: bool = False) -> Callable:
    """Decorate an API view: the caller's key must grant `permission`; the view finds it in g.principal.

    `demo_without_key`: in demo mode, a keyless call from the loopback address acts as an editor
    named "demo (no key, loopback)" (demo jobs only; DEMO_MODE is off unless set).
    """
    def decorate(view: Callable) -> Callable:
        @wraps(view)
        def wrapped(*args, **kwargs):
            g.principal = api_principal(permission, demo_without_key=demo_without_key)
            return view(*args, **kwargs)
        wrapped.permission = permission
        return wrapped
    return decorate


# -- UI session -------------------------------------------------------------------------------

def sign_in(principal: Principal) -> None:
    session.clear()
    session["key_id"] = principal.key_id
    session["csrf"] = secrets.token_urlsafe(32)


def sign_out() -> None:
    session.clear()


def session_principal() -> Principal | None:
    key_id = session.get("key_id")
    if not isinstance(key_id, int):
        return None
    principal = keys.by_id(get_conn(), key_id)
    if principal is None:
        session.clear()
    return principal


def csrf_token() -> str:
    token = session.get("csrf")
    if not token:
        token = session["csrf"] = secrets.token_urlsafe(32)
    return token


def check_csrf() -> None:
    """Refuse a state-changing UI request whose form token does not match the session's."""
    sent = request.form.get("csrf_token", "")
    expected = session.get("csrf", "")
    if not expected or not hmac.compare_digest(str(sent), str(expected)):
        abort(400, description="the form's security token is missing or stale; reload the page and try again")
