"""Server-side UI sessions: the cookie holds only a random token, the `web_sessions` table the rest.

Signing in makes a new row (keyed by the sha256 of a fresh 256-bit token, so a copy of
the table signs nobody in) holding the key's id, the session's CSRF token and flash
messages. Every lookup checks, in one statement, that the row exists, the key is live,
the session was used within SESSION_IDLE_SECONDS and is younger than SESSION_MAX_SECONDS,
and restarts the idle clock. Sign-out deletes the row, so a copied cookie is worthless
afterwards; revoking a key deletes its rows. Nothing in the cookie is signed or
trusted: a cookie made with any secret, guessed or not, matches no row.

The session is loaded lazily (by the UI's guard, or the media route), so health checks,
API calls and static files never touch the table. Before sign-in there is no row: the
sign-in form's CSRF token is an HMAC of a random nonce kept in its own cookie.

Cookies are HttpOnly and SameSite=Lax; over https (directly, or behind a trusted proxy,
see web.security) they are `Secure` and named with the `__Host-` prefix, which browsers
accept only from a secure origin, for the whole host, without a Domain attribute.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from flask import Flask, g, request, session
from flask.sessions import SessionInterface, SessionMixin
from werkzeug.datastructures import CallbackDict
from werkzeug.wrappers import Response

from pipeline import sessions as session_rows
from pipeline.core.principal import Principal
from web.db import get_conn, settings

NAME = "mediapipe_session"
SIGNIN_NAME = "mediapipe_signin"
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{20,100}$")


def cookie_name(base: str) -> str:
    return f"__Host-{base}" if request.is_secure else base


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class ServerSession(CallbackDict, SessionMixin):
    """Flask's `session`: empty until `load()` finds the live row of the cookie's token."""

    def __init__(self, token: str | None) -> None:
        def on_update(self: ServerSession) -> None:
            self.modified = True
        super().__init__(None, on_update)
        self.token = token                      # from the cookie, unverified
        self.token_hash: str | None = None      # set once a live row is found or made
        self.principal: Principal | None = None
        self.loaded = False
        self.modified = False
        self.new_token: str | None = None       # sign-in: send this cookie
        self.ended = False                      # sign-out: remove the cookie


class SessionStore(SessionInterface):
    def open_session(self, app: Flask, request) -> ServerSession:  # noqa: D102 - Flask's interface
        token = request.cookies.get(cookie_name(NAME))
        return ServerSession(token if token and _TOKEN.match(token) else None)

    def save_session(self, app: Flask, sess: ServerSession, response: Response) -> None:  # noqa: D102
        secure = request.is_secure
        if sess.ended or (sess.loaded and sess.token and not sess.token_hash and not sess.new_token):
            response.delete_cookie(cookie_name(NAME), path="/", secure=secure, httponly=True, samesite="Lax")
        elif sess.new_token:
            response.set_cookie(cookie_name(NAME), sess.new_token, max_age=int(settings().session_max_seconds),
                                path="/", secure=secure, httponly=True, samesite="Lax")
        if sess.token_hash and sess.modified and not sess.ended:
            session_rows.save(get_conn(), sess.token_hash, dict(sess))
        nonce = g.get("new_signin_nonce")
        if nonce:
            response.set_cookie(cookie_name(SIGNIN_NAME), nonce, max_age=int(settings().session_max_seconds),
                                path="/", secure=secure, httponly=True, samesite="Strict")
        if sess.loaded:
            response.vary.add("Cookie")


def current() -> ServerSession:
    """This request's session, looked up in the table on first use."""
    sess: ServerSession = session._get_current_object()  # type: ignore[attr-defined]
    if not sess.loaded:
        sess.loaded = True
        if sess.token:
            row = session_rows.touch(get_conn(), settings(), _hash(sess.token))
            if row is not None:
                dict.update(sess, row["data"])  # loading is not a change
                sess.token_hash = _hash(sess.token)
                sess.principal = Principal(row["key_id"], row["owner"], row["role"], row["team"])
    return sess


def start(principal: Principal) -> None:
    """Sign `principal` in with a new session (a session started before it, if any, ends)."""
    sess = current()
    token = secrets.token_urlsafe(32)
    csrf = secrets.token_urlsafe(32)
    session_rows.start(get_conn(), settings(), _hash(token), principal.key_id, {"csrf": csrf}, replaces=sess.token_hash)
    dict.clear(sess)
    dict.update(sess, {"csrf": csrf})
    sess.token, sess.token_hash, sess.principal, sess.new_token = token, _hash(token), principal, token
    sess.modified = False


def end() -> None:
    """Sign out: the row goes, so this cookie (or a copy of it) opens nothing any more."""
    sess = current()
    if sess.token_hash:
        session_rows.end(get_conn(), sess.token_hash)
    dict.clear(sess)
    sess.token_hash, sess.principal, sess.ended = None, None, True


def _signin_mac(nonce: str) -> str:
    return hmac.new(settings().secret_key.encode(), f"signin:{nonce}".encode(), hashlib.sha256).hexdigest()


def signin_csrf(*, create: bool) -> str:
    """The sign-in form's CSRF token: an HMAC of the nonce in this browser's sign-in cookie."""
    nonce = request.cookies.get(cookie_name(SIGNIN_NAME), "")
    if not _TOKEN.match(nonce):
        if not create:
            return ""
        nonce = g.get("new_signin_nonce") or secrets.token_urlsafe(24)
        g.new_signin_nonce = nonce
    return _signin_mac(nonce)


def init_app(app: Flask) -> None:
    app.session_interface = SessionStore()
