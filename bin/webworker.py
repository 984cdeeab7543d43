"""The web's gunicorn worker (bin/gunicorn_conf.py): gunicorn's threaded worker, except that a thread gets a
request only once all of it has arrived.

gunicorn's `gthread` hands a new connection to a thread at once; the thread waits up to 5 s for a first byte, then
blocks while it reads the head and the body. A client that sends a byte at a time holds that thread as long as it
likes, and, once the app has read its key, one of the process's four database connections too
(docs/decisions.md, "Slow clients are gathered by the worker's event loop"). Here the event loop, which already
waits on every socket at once, gathers each request's bytes until its head and its Content-Length body are in
memory, and only then hands the connection to a thread with those bytes already read: the app never waits on a
client. What is refused, without a thread:

* a request not whole `WEB_REQUEST_SECONDS` (30) after it began (a new connection's accept, or a kept-alive one's
  first byte): 408;
* a head over `MAX_HEAD_BYTES`: 431; a body over the app's own limit (`web.inputs.MAX_BODY_BYTES`): 413;
* a body without a Content-Length (`Transfer-Encoding: chunked`): 411;
* bytes that would take the process's gathered total past `MAX_GATHERED_BYTES`: 503, so many slow uploads cannot
  exhaust memory.

An answer is written from the thread with a send timeout of `WEB_REQUEST_SECONDS`: a client that stops reading is
let go. A client that keeps reading a large answer slowly still holds its thread (docs/security.md: the proxy's part).
Plain HTTP/1.1 only: TLS ends at the proxy, and HTTP/2 is not configured; the worker refuses to start otherwise.
"""

from __future__ import annotations

import errno
import json
import re
import time
from dataclasses import dataclass, field
from functools import partial

import selectors

from gunicorn.workers.gthread import ThreadWorker

from pipeline import settings
from web.inputs import MAX_BODY_BYTES

MAX_HEAD_BYTES = 64 * 1024   # a request line and its header fields
MAX_GATHERED_BYTES = 64 * 1024 * 1024   # all requests being gathered by one process
# The worker's own refusals, in the API's error shape: status -> (reason phrase, code, message)
REFUSALS = {
    408: ("Request Timeout", "request_timeout", "the request was not whole in time (WEB_REQUEST_SECONDS); send it again"),
    411: ("Length Required", "length_required", "send the body with a Content-Length; chunked bodies are not taken"),
    413: ("Content Too Large", "request_entity_too_large", f"the body is over {MAX_BODY_BYTES} bytes"),
    431: ("Request Header Fields Too Large", "request_header_fields_too_large",
          f"the request line and header fields are over {MAX_HEAD_BYTES} bytes"),
    503: ("Service Unavailable", "service_unavailable", "the server is busy or restarting; retry shortly"),
}
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length[ \t]*:[ \t]*([^\r]*)", re.IGNORECASE)
_TRANSFER_ENCODING = re.compile(rb"\r\ntransfer-encoding[ \t]*:", re.IGNORECASE)
_EXPECT_CONTINUE = re.compile(rb"\r\nexpect[ \t]*:[ \t]*100-continue[ \t]*\r\n", re.IGNORECASE)


@dataclass(frozen=True)
class Verdict:
    """What the bytes of a request gathered so far call for: hand it on (`whole`), refuse it (`refuse`, a status),
    or wait for more, telling the client to go on first when it waits for that (`go_on`: 100 Continue)."""

    whole: bool = False
    refuse: int | None = None
    go_on: bool = False


MORE = Verdict()


@dataclass(frozen=True)
class Head:
    """What a request's head says about the rest (`refuse`: the status that refuses it before its body)."""

    refuse: int | None = None
    body: int = 0                 # the body's length, to gather before the request is whole
    expects_continue: bool = False


def read_head(head: bytes, *, max_body: int = MAX_BODY_BYTES) -> Head:
    """The head of an HTTP/1.1 request, up to its blank line (pure). A Content-Length that is not one number is left
    to gunicorn's parser, which refuses it (400) from the bytes it holds, without reading more."""
    if _TRANSFER_ENCODING.search(head):
        return Head(refuse=411)
    lengths = {value.strip() for value in _CONTENT_LENGTH.findall(head)}
    if len(lengths) != 1:
        return Head()
    length = lengths.pop()
    if not (length.isdigit() and length.isascii()):
        return Head()
    if int(length) > max_body:
        return Head(refuse=413)
    return Head(body=int(length), expects_continue=bool(_EXPECT_CONTINUE.search(head)))


def refusal(status: int) -> bytes:
    """The whole answer that refuses a request the worker will not run; the connection closes after it."""
    reason, code, message = REFUSALS[status]
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    retry = "Retry-After: 1\r\n" if status == 503 else ""
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{retry}Cache-Control: no-store\r\nConnection: close\r\n\r\n").encode() + body


@dataclass
class Gathering:
    """The bytes of one request as they arrive, and what they call for (pure: the worker reads and answers).
    Each piece costs time in proportion to its own length: the head's end is looked for in the new bytes only,
    and once the head is read only the body's length is counted."""

    until: float
    data: bytearray = field(default_factory=bytearray)
    body_at: int | None = None    # where the body starts, once the head is in
    head: Head = Head()
    told_to_go_on: bool = False

    def take(self, piece: bytes, *, max_head: int = MAX_HEAD_BYTES) -> Verdict:
        looked = max(0, len(self.data) - 3)
        self.data += piece
        if self.body_at is None:
            end = self.data.find(b"\r\n\r\n", looked)
            if end < 0 or end > max_head:
                return Verdict(refuse=431) if len(self.data) > max_head else MORE
            self.body_at, self.head = end + 4, read_head(bytes(self.data[:end + 2]))
            if self.head.refuse is not None:
                return Verdict(refuse=self.head.refuse)
        if len(self.data) - self.body_at >= self.head.body:
            return Verdict(whole=True)
        if self.head.expects_continue and not self.told_to_go_on and len(self.data) == self.body_at:
            self.told_to_go_on = True   # gunicorn's parser may say it again: a client reads any 1xx before its
            return Verdict(go_on=True)  # answer (RFC 9110, 15.2)
        return MORE


class WholeRequestWorker(ThreadWorker):
    """gthread, with each request gathered whole by the event loop before a thread runs it (module docstring)."""

    def init_process(self) -> None:
        if self.cfg.is_ssl or self.cfg.http2_cleartext not in (None, "", "off", "none"):
            raise RuntimeError("bin.webworker serves plain HTTP/1.1 only: end TLS at the proxy, and leave HTTP/2 off")
        self.request_seconds = settings.load().web_request_seconds
        self.gathering: dict[object, Gathering] = {}
        self.gathered_bytes = 0
        super().init_process()

    def enqueue_req(self, conn) -> None:
        """A connection whose request is whole goes to a thread; any other first has its request gathered here.
        gunicorn calls this for a new connection, a kept-alive one that became readable, and one whose client
        sent its next request behind the last (those bytes are gathered first)."""
        if getattr(conn, "whole", False):
            conn.whole = False
            super().enqueue_req(conn)
            return
        held = conn.parser.unreader.take_buffered() if conn.parser is not None else b""
        conn.sock.setblocking(False)
        self.gathering[conn] = Gathering(until=time.monotonic() + self.request_seconds)
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._read, conn))
        if held:
            self._take(conn, held)

    def _read(self, conn, _sock) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:   # the client went away
            self._let_go(conn)
            return
        self._take(conn, data)

    def _take(self, conn, data: bytes) -> None:
        if self.gathered_bytes + len(data) > MAX_GATHERED_BYTES:
            self._let_go(conn, 503)
            return
        self.gathered_bytes += len(data)
        verdict = self.gathering[conn].take(data)
        if verdict.refuse is not None:
            self._let_go(conn, verdict.refuse)
        elif verdict.whole:
            self._hand_on(conn)
        elif verdict.go_on:
            self._send(conn, b"HTTP/1.1 100 Continue\r\n\r\n")

    def _stop_gathering(self, conn) -> bytes:
        gathering = self.gathering.pop(conn)
        self.gathered_bytes -= len(gathering.data)
        try:
            self.poller.unregister(conn.sock)
        except (KeyError, ValueError, OSError):
            pass
        return bytes(gathering.data)

    def _hand_on(self, conn) -> None:
        data = self._stop_gathering(conn)
        conn.init()   # the parser, over a blocking socket; a kept-alive connection keeps its own
        conn.parser.unreader.unread(data)
        conn.data_ready = conn.whole = True
        self.enqueue_req(conn)

    def _let_go(self, conn, status: int | None = None) -> None:
        """Close a connection whose request will not be run, answering `status` first when there is one."""
        self._stop_gathering(conn)
        if status is not None:
            self._send(conn, refusal(status))
        self.nr_conns -= 1
        conn.close()

    @staticmethod
    def _send(conn, data: bytes) -> None:
        """A few bytes to a non-blocking socket; what does not fit now is dropped, as the connection is closing
        or the client is waiting for exactly this."""
        try:
            conn.sock.send(data)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, None):
                raise

    def murder_pending(self) -> None:
        """gunicorn's own pending connections, then the requests not whole in time (all of them once the worker
        is stopping: a deploy does not wait for a slow client)."""
        super().murder_pending()
        now = time.monotonic()
        for conn in [c for c, g in self.gathering.items() if g.until <= now or not self.alive]:
            self._let_go(conn, 408 if self.alive else 503)

    def handle_request(self, req, conn):
        conn.sock.settimeout(self.request_seconds)   # the answer's writes; the request itself is already in memory
        return super().handle_request(req, conn)
