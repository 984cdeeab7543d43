"""Errors as answers: `{"error": {"code", "message", ...}}` for /api/, a plain page for the UI.

Domain errors map to status codes here and nowhere else: InvalidInput -> 422 naming
the field, NotFound -> 404, Conflict -> 409 (an Idempotency-Key reused for another
body -> 422), KeyLimitReached -> 429 and CapacityExceeded -> 503, both with Retry-After,
PostgreSQL away -> 503.
Anything unexpected is logged and answered 500 without internals.
"""

from __future__ import annotations

import traceback

import psycopg
from flask import Flask, Response, current_app, g, jsonify, render_template, request
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound, StaleTransition
from pipeline.log import log


class Problem(Exception):
    """An HTTP-level refusal raised by web code (auth, malformed requests)."""

    def __init__(self, status: int, code: str, message: str, *, field: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.field, self.headers = field, headers or {}


def is_api() -> bool:
    """Answers for programs (JSON errors): the API, media and metrics; the rest are pages."""
    return request.path.startswith(("/api/", "/media/")) or request.path == "/metrics"


def answer(status: int, code: str, message: str, *, headers: dict[str, str] | None = None, detail: bool = True,
           **extra: object) -> Response:
    """The error as JSON for programs, or as our page (in the layout, with the header) for people: the code in the
    reader's words, the English message folded under it (left out with `detail` False: Werkzeug's own wording)."""
    if is_api():
        body = {"code": code, "message": message, **{k: v for k, v in extra.items() if v is not None}}
        response = jsonify(error=body)
    else:
        _signed_in_user()
        response = Response(render_template("error.html", status=status, code=code,
                                            message=message if detail else None), mimetype="text/html")
    response.status_code = status
    response.headers.update(headers or {})
    return response


def _signed_in_user() -> None:
    """Who is signed in, for the header of an error page that no page's guard ran for (an address no route
    matches, a body too large to read): the layout then shows the user and sign-out as on every page."""
    if "user" in g:
        return
    try:
        from web.auth import session_principal
        g.user = session_principal()
    except (psycopg.Error, HTTPException):   # the database is away, or the request cannot be read: no one
        g.user = None


def _http(exc: HTTPException) -> Response:
    code = (exc.name or "error").lower().replace(" ", "_")
    headers = {"Allow": ", ".join(exc.valid_methods)} if getattr(exc, "valid_methods", None) else None
    if isinstance(exc, RequestEntityTooLarge):
        limit = current_app.config["MAX_CONTENT_LENGTH"]
        return answer(413, code, f"the request body is larger than the limit of {limit // 1024 // 1024} MiB",
                      headers=headers)
    own_words = exc.description != type(exc).description   # ours (abort with a description), not Werkzeug's
    return answer(exc.code or 500, code, exc.description or exc.name, headers=headers, detail=own_words)


def _conflict(exc: Conflict) -> Response:
    status = 422 if exc.code == "idempotency_key_reused" else 409
    return answer(status, exc.code, str(exc), details=exc.details or None)


def _capacity(exc: CapacityExceeded) -> Response:
    return answer(503, "over_capacity", f"{exc}; nothing was saved, retry after {exc.retry_after} s",
                  headers={"Retry-After": str(exc.retry_after)})


def _key_limit(exc: KeyLimitReached) -> Response:
    return answer(429, "key_limit_reached", f"{exc}; nothing was saved, retry after {exc.retry_after} s",
                  headers={"Retry-After": str(exc.retry_after)})


def _database(exc: psycopg.OperationalError) -> Response:
    log("database_unavailable", path=request.path, error=exc.__class__.__name__)
    return answer(503, "database_unavailable", "the database is unreachable; retry shortly",
                  headers={"Retry-After": "5"})


def _database_busy(exc: psycopg.OperationalError) -> Response:
    # a statement or a lock wait ran past its bound (DB_STATEMENT_TIMEOUT_MS, DB_LOCK_TIMEOUT_MS):
    # the transaction was rolled back, nothing was written
    which = "a lock" if isinstance(exc, psycopg.errors.LockNotAvailable) else "a statement"
    log("database_busy", path=request.path, error=exc.__class__.__name__)
    return answer(503, "database_busy", f"the database is busy ({which} took too long); nothing was changed, "
                                        "retry shortly", headers={"Retry-After": "2"})


def _unexpected(exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return _http(exc)
    # messages may quote input, which logs must not hold: log the class and where it was raised
    frame = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    log("request_failed", path=request.path, method=request.method, error=exc.__class__.__name__,
        at=f"{frame.filename}:{frame.lineno}" if frame else None)
    return answer(500, "internal_error", "something went wrong on our side; it was logged")


def init_app(app: Flask) -> None:
    app.register_error_handler(Problem, lambda e: answer(e.status, e.code, e.message, field=e.field,
                                                         headers=e.headers))
    app.register_error_handler(InvalidInput, lambda e: answer(422, "invalid_input", str(e), field=e.field))
    app.register_error_handler(NotFound, lambda e: answer(404, "not_found", str(e)))
    app.register_error_handler(Conflict, _conflict)
    app.register_error_handler(StaleTransition, lambda e: answer(409, "stale_transition", str(e)))
    app.register_error_handler(CapacityExceeded, _capacity)
    app.register_error_handler(KeyLimitReached, _key_limit)
    app.register_error_handler(psycopg.OperationalError, _database)
    app.register_error_handler(psycopg.errors.QueryCanceled, _database_busy)
    app.register_error_handler(psycopg.errors.LockNotAvailable, _database_busy)
    app.register_error_handler(HTTPException, _http)
    app.register_error_handler(Exception, _unexpected)
