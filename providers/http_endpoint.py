"""One POST to a provider, bounded in bytes and in time.

This module owns the transport of a call: the URL (`api_root` + `/v1/...`), the
headers sent on every call (Bearer key, Idempotency-Key, `Accept-Encoding:
identity`), and reading the answer so that no provider can hold a worker or
fill its memory:

* the body is streamed and refused past `max_bytes` (a declared Content-Length
  over the cap is refused before reading);
* a compressed answer is refused (we asked for identity), so nothing is ever
  decompressed without a bound;
* one deadline covers connect, wait and body; each socket read waits at most
  the time left, so a body that trickles one byte a second ends at the
  deadline, not at the read timeout of each byte.

Past the cap or the deadline the request had arrived, so the outcome is
Ambiguous. Every failure goes through `classify` once. No database, no tasks.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, BinaryIO, TypeVar

import requests
import urllib3

from .errors import Ambiguous
from .http_classify import BadBody, HttpStatus, classify
from .urls import api_root

CHUNK = 64 * 1024
T = TypeVar("T")


@dataclass(frozen=True)
class Answer:
    """A 2xx answer read whole within the limits."""

    headers: Mapping[str, str]
    body: bytes = field(repr=False)

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def request_id(self) -> str:
        return self.headers.get("x-request-id") or self.headers.get("request-id") or ""


@dataclass(frozen=True)
class Limits:
    """How long one call may take and how large its answer may be."""

    connect_timeout: float
    read_timeout: float
    call_timeout: float
    max_bytes: int


class HttpEndpoint:
    """A base URL, a secret key, a session and limits: POSTs JSON and classifies failures."""

    def __init__(self, base_url: str, api_key: str, session: requests.Session, limits: Limits) -> None:
        self.base_url = base_url.rstrip("/")
        self.root = api_root(base_url)
        self._api_key = api_key
        self._session = session
        self.limits = limits

    def post(self, path: str, payload: dict, key: str, parse: Callable[[Answer], T],
             seconds_left: float | None = None) -> T:
        """POST `payload` to `{root}{path}`; `parse` turns the answer into a result or raises BadBody.

        `seconds_left` (the task's time before its total deadline) shortens the
        call's own deadline, never lengthens it.
        """
        return self.request("POST", path, parse, key=key, seconds_left=seconds_left, json=payload)

    def request(self, method: str, path: str, parse: Callable[[Answer], T], *, key: str = "",
                seconds_left: float | None = None, sink: BinaryIO | None = None, cap: int | None = None,
                **send: Any) -> T:
        """One request to `{root}{path}` (`send`: requests' json, files, data, params), bounded like `post`.

        With `sink`, a 2xx body is written there (up to `cap` bytes) instead of kept in memory, and
        `parse` gets an empty answer: large files are streamed, never held whole.
        """
        budget = self.limits.call_timeout if seconds_left is None else min(self.limits.call_timeout, seconds_left)
        deadline = time.monotonic() + max(budget, 0.0)
        headers = {"Authorization": f"Bearer {self._api_key}", "Accept-Encoding": "identity",
                   **({"Idempotency-Key": key} if key else {})}
        try:
            wait = max(0.01, budget)
            response = self._session.request(
                method, f"{self.root}{path}", headers=headers, stream=True, allow_redirects=False,
                timeout=(min(self.limits.connect_timeout, wait), min(self.limits.read_timeout, wait)), **send)
            with response:
                ok = 200 <= response.status_code < 300
                limit = self.limits.max_bytes if cap is None else cap
                if ok and sink is not None:
                    read_bounded(response, limit, deadline, self.limits.read_timeout, sink=sink)
                    body = b""
                else:
                    body = read_bounded(response, self.limits.max_bytes, deadline, self.limits.read_timeout)
            if not ok:
                raise HttpStatus(response.status_code, response.headers, body)
            return parse(Answer(response.headers, body))
        except (OSError, ValueError, HttpStatus, urllib3.exceptions.HTTPError, Ambiguous) as exc:
            raise classify(exc, secret=self._api_key) from exc


def read_bounded(response: requests.Response, cap: int, deadline: float, read_timeout: float,
                 sink: BinaryIO | None = None) -> bytes:
    """The whole body, or Ambiguous once it passes `cap` bytes or the deadline; BadBody if it is cut short.
    With `sink`, the body goes there and b"" is returned."""
    encoding = response.headers.get("Content-Encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise BadBody(f"the answer is {encoding}-compressed although identity was asked for; it is not decoded")
    declared = response.headers.get("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > cap:
        raise Ambiguous(f"the answer declares {declared} bytes, over the cap of {cap} (*_MAX_BYTES)")
    sock = _socket(response)
    chunks, size = [], 0
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Ambiguous(f"the answer was not complete within the call's deadline ({size} bytes read)")
        if sock is not None and sock.fileno() >= 0:  # closed once a declared length is read
            sock.settimeout(min(left, read_timeout))
        try:
            chunk = response.raw.read1(CHUNK, decode_content=False)
        except (TimeoutError, urllib3.exceptions.ReadTimeoutError) as exc:
            if time.monotonic() >= deadline - 0.05:
                raise Ambiguous(f"the answer was not complete within the call's deadline ({size} bytes read)") from exc
            raise Ambiguous(f"no byte of the answer within the read timeout of {read_timeout} s") from exc
        if not chunk:
            break
        size += len(chunk)
        if size > cap:
            raise Ambiguous(f"the answer passed the cap of {cap} bytes (*_MAX_BYTES)")
        if sink is None:
            chunks.append(chunk)
        else:
            sink.write(chunk)
    if declared is not None and declared.isdigit() and int(declared) != size:
        raise BadBody(f"body is {size} bytes, Content-Length says {declared}")
    return b"".join(chunks)


def _socket(response: requests.Response):
    """The socket the body is read from, to bound each read by the time left; None if not reachable.

    Neither requests nor urllib3 expose it once the answer says `Connection: close`
    (the connection drops its reference), so it is found through the file object the
    body is read from. Without it each read still waits at most the timeout given at
    the start of the call, and test_bounded_answers shows which one is in force.
    """
    reader = getattr(getattr(response.raw, "_fp", None), "fp", None)   # http.client's buffered reader
    return getattr(getattr(reader, "raw", None), "_sock", None)         # socket.SocketIO's socket
