"""A request id per HTTP request: in every log line of that request, and in the answer's `X-Request-Id`.

An `X-Request-Id` sent by the caller is taken only from a trusted proxy (TRUSTED_PROXIES set: the
proxy in front sets or passes it) and only when it is sane (8 to 64 letters, digits, `.`, `_`, `:`
or `-`); otherwise the app makes its own, so a client cannot write what it likes into the logs.
"""

from __future__ import annotations

import re
import time
import uuid

from flask import Flask, Response, g, request

from pipeline import log as logs
from pipeline.log import log

SANE = re.compile(r"^[A-Za-z0-9._:-]{8,64}$")
HEADER = "X-Request-Id"
WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def request_id(sent: str | None, trusted: bool) -> str:
    """The id of this request: the proxy's, when trusted and sane; else a new one. Pure."""
    if trusted and sent and SANE.match(sent):
        return sent
    return uuid.uuid4().hex


def init_app(app: Flask, trusted_proxies: int) -> None:
    @app.before_request
    def _begin() -> None:
        g.request_id = request_id(request.headers.get(HEADER), trusted_proxies > 0)
        g.request_started = time.monotonic()
        g.request_log = logs.bind(request_id=g.request_id)

    @app.after_request
    def _answer(response: Response) -> Response:
        rid = getattr(g, "request_id", None)
        if rid is not None:
            response.headers[HEADER] = rid
            if request.method in WRITES:   # a change is worth its line; reads would drown it
                log("request", method=request.method, path=request.path, status=response.status_code,
                    ms=round(1000 * (time.monotonic() - g.request_started)))
        return response

    @app.teardown_request
    def _end(_exc: BaseException | None) -> None:
        token = g.pop("request_log", None)
        if token is not None:
            logs.unbind(token)
