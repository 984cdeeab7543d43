"""One webhook request: resolve the endpoint's host, refuse addresses we must not reach, POST to the address that
was checked, and read a bounded answer, all within one deadline.

The host is resolved here, on every attempt, and the connection goes to the address that passed the check
(pipeline/core/webhooks.py `vet`), with the host's name kept for TLS (SNI and the certificate check) and the Host
header: a name that resolves to a public address when checked and to a private one a moment later (DNS rebinding)
never gets a request to the private one. Redirects are answers like any other (http.client follows none). A
receiver that sends its answer slowly is cut off at the deadline: a watchdog shuts the socket down. At most
MAX_ANSWER bytes of the answer are read. Errors become an `Answer` here, once; nothing else in the pipeline
handles socket or TLS errors.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Sequence

from pipeline.core.webhooks import Target, UnsafeURL, target, vet

MAX_ANSWER = 4096          # bytes of a receiver's answer we read (its status is what counts)
KEPT_ANSWER = 200          # characters of it kept with a failed attempt


@dataclass(frozen=True)
class Answer:
    http_status: int | None     # None: no answer (refused, unreachable, timed out, TLS)
    latency_ms: int
    error: str | None           # what went wrong, for the attempt's record
    refused: bool = False       # the URL or its addresses were refused before any connection


def resolve(where: Target) -> list[str]:
    """The addresses the host resolves to now (the system resolver; a literal address is itself)."""
    infos = socket.getaddrinfo(where.host, where.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    return list(dict.fromkeys(info[4][0] for info in infos))


def check(url: str, allowed: Sequence[str]) -> str:
    """The address a request to `url` would go to now, or UnsafeURL (registration asks this too)."""
    where = target(url)
    try:
        addresses = resolve(where)
    except (socket.gaierror, UnicodeError) as exc:
        raise UnsafeURL(f"{where.host} does not resolve ({exc}); check the host name") from None
    return vet(where, addresses, allowed)


class _Pinned(http.client.HTTPConnection):
    """An HTTP connection to a checked address, named by its host."""

    def __init__(self, where: Target, address: str, timeout: float) -> None:
        super().__init__(where.host, where.port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedTLS(http.client.HTTPSConnection):
    """An HTTPS connection to a checked address; SNI and the certificate check use the host's name."""

    def __init__(self, where: Target, address: str, timeout: float) -> None:
        super().__init__(where.host, where.port, timeout=timeout, context=ssl.create_default_context())
        self._address = address

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._context.wrap_socket(raw, server_hostname=self.host)


def post(url: str, body: bytes, headers: Mapping[str, str], *, timeout: float, allowed: Sequence[str]) -> Answer:
    """POST `body` to `url` once; the answer's status, or why there is none."""
    started = time.monotonic()

    def answer(status: int | None, error: str | None, refused: bool = False) -> Answer:
        return Answer(status, int((time.monotonic() - started) * 1000), error, refused)

    try:
        where = target(url)
        address = check(url, allowed)
    except UnsafeURL as exc:
        return answer(None, f"refused: {exc}", refused=True)
    conn = (_PinnedTLS if where.scheme == "https" else _Pinned)(where, address, timeout)
    expired = threading.Event()

    def cut_off() -> None:
        expired.set()
        sock = conn.sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    watchdog = threading.Timer(timeout, cut_off)
    watchdog.daemon = True
    watchdog.start()
    try:
        conn.request("POST", where.path, body=body, headers={**headers, "content-length": str(len(body))})
        response = conn.getresponse()
        text = response.read(MAX_ANSWER)
        status = response.status
        if expired.is_set():   # a socket shut down reads as the end of the answer: it is no answer
            return answer(None, f"no answer within {timeout:g} s")
        if 200 <= status < 300:
            return answer(status, None)
        excerpt = text.decode("utf-8", "replace")[:KEPT_ANSWER].strip()
        return answer(status, f"HTTP {status} {response.reason}".strip() + (f": {excerpt}" if excerpt else ""))
    except (OSError, http.client.HTTPException) as exc:
        if expired.is_set() or isinstance(exc, TimeoutError):
            return answer(None, f"no answer within {timeout:g} s")
        if isinstance(exc, ssl.SSLError):
            return answer(None, f"TLS: {exc.reason or exc}"[:300])
        return answer(None, f"{exc.__class__.__name__}: {exc}"[:300])
    finally:
        watchdog.cancel()
        conn.close()
