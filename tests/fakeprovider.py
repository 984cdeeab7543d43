"""A controllable fake of an OpenAI-compatible provider, as a real HTTP server.

It listens on 127.0.0.1 (port 0 picks a free port) and speaks
`POST /v1/images/generations` (answers a small real PNG as b64_json) and
`POST /v1/audio/speech` (answers a small real WAV). The picture's colour and
the tone's pitch come from the execution number, so a replayed answer is
byte-identical to the first one and a new execution is not.

Scripting: a queue of per-call behaviours, consumed in order (a behaviour may
be limited to one endpoint), then a default behaviour. Each request, whatever
its idempotency key, consumes the next behaviour. Actions:

    ok          answer normally
    delay       wait `seconds`, then answer
    hold        wait until `release()` (at most `seconds`), then answer
    status      answer `status` with {"error": {"message"}} and optional Retry-After
    hang        accept, then wait `seconds` (past the client's read timeout) and close
    drop        read the request, close the connection without a response
    reset       read the request, abort the connection (TCP RST)
    truncate    send a Content-Length larger than the body sent, then close
    bad_body    200 with an undecodable body (not JSON / not a WAV)
    bad_base64  200 with JSON whose b64_json is not base64

`execute` says whether a failing call (status, hang, drop, reset) was
executed (charged) before failing; by default every action but `status` is.
With `honour_keys` on, a request whose key was executed before gets the first
answer back and is not executed again (a scripted failure still fails).

Refusing connections: `refuse_connections(seconds)` closes the listening
socket, so connection attempts get ECONNREFUSED from the kernel (nothing is
listening on the port); `accept_connections()`, or the timer when `seconds` is
given, binds a new listening socket on the same port. Responses always carry
`Connection: close`, so no pooled keep-alive connection can slip past a refusal.

Counters: requests and executions per idempotency key, requests in flight and
their peak per endpoint ("image", "audio"). Everything is reachable from
Python (`calls_for`, `max_in_flight`, `script`, `reset`, ...) and over HTTP
(`GET /_fake/stats`, `POST /_fake/script`, `POST /_fake/reset`,
`POST /_fake/release`) for tests that drive it from another process.
`POST /_fake/script` takes JSON such as::

    {"behaviours": [{"action": "status", "status": 503, "retry_after": "2"}],
     "default": {"action": "ok"}, "honour_keys": true, "refuse_seconds": 1.5}

While connections are refused, the control endpoints are unreachable too, so
from another process refuse only for a period (`refuse_seconds`).
"""

from __future__ import annotations

import base64
import io
import json
import math
import socket
import struct
import threading
import time
import wave
import zlib
from collections import Counter, deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ENDPOINTS = {"/v1/images/generations": "image", "/v1/audio/speech": "audio"}
ACTIONS = ("ok", "delay", "hold", "status", "hang", "drop", "reset", "truncate", "bad_body", "bad_base64")


@dataclass(frozen=True)
class Behaviour:
    """What the fake does with one request."""

    action: str = "ok"
    seconds: float = 0.0
    status: int = 200
    retry_after: str | None = None
    message: str | None = None
    execute: bool | None = None
    endpoint: str | None = None

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}: choose one of {', '.join(ACTIONS)}")
        if self.endpoint not in (None, *ENDPOINTS.values()):
            raise ValueError(f"unknown endpoint {self.endpoint!r}: use 'image', 'audio' or None")

    @property
    def executes(self) -> bool:
        # An answer needs an execution (or a replay); only failures may skip it.
        if self.action in ("status", "hang", "drop", "reset") and self.execute is not None:
            return self.execute
        return self.action != "status"

    @classmethod
    def from_json(cls, data: dict) -> Behaviour:
        return cls(**data)

    @staticmethod
    def fail(status: int, *, retry_after: str | float | None = None, message: str | None = None,
             endpoint: str | None = None, execute: bool | None = None) -> Behaviour:
        after = None if retry_after is None else str(retry_after)
        return Behaviour("status", status=status, retry_after=after, message=message,
                         endpoint=endpoint, execute=execute)


@dataclass(frozen=True)
class Calls:
    """How often one idempotency key reached the fake, and how often it was executed."""

    requests: int = 0
    executions: int = 0


@dataclass(frozen=True)
class RecordedRequest:
    endpoint: str
    key: str
    headers: dict
    body: Any


def tiny_png(seed: int) -> bytes:
    """An 8x8 RGB PNG of one colour chosen by `seed`, built with zlib only."""
    colour = bytes(((seed * 67) % 256, (seed * 131 + 40) % 256, (seed * 29 + 90) % 256))
    raw = b"".join(b"\x00" + colour * 8 for _ in range(8))

    def chunk(tag: bytes, payload: bytes) -> bytes:
        return struct.pack(">I", len(payload)) + tag + payload + struct.pack(">I", zlib.crc32(tag + payload))

    header = struct.pack(">IIBBBBB", 8, 8, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def tiny_wav(seed: int, seconds: float = 0.2, rate: int = 22050) -> bytes:
    """A short 16-bit mono sine tone whose pitch is chosen by `seed`."""
    pitch = 330 + 10 * (seed % 50)
    frames = b"".join(
        struct.pack("<h", int(8000 * math.sin(2 * math.pi * pitch * n / rate))) for n in range(int(seconds * rate))
    )
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(frames)
    return buffer.getvalue()


@dataclass
class _Answer:
    content_type: str
    body: bytes
    request_id: str


@dataclass
class _State:
    """Everything the fake counts and remembers; guarded by FakeProviderServer._lock."""

    queue: deque = field(default_factory=deque)
    default: Behaviour = field(default_factory=Behaviour)
    honour_keys: bool = False
    requests: Counter = field(default_factory=Counter)
    executions: Counter = field(default_factory=Counter)
    answers: dict = field(default_factory=dict)
    in_flight: Counter = field(default_factory=Counter)
    peak: Counter = field(default_factory=Counter)
    log: list = field(default_factory=list)
    total_executions: int = 0

    def next_behaviour(self, endpoint: str) -> Behaviour:
        for behaviour in self.queue:
            if behaviour.endpoint in (None, endpoint):
                self.queue.remove(behaviour)
                return behaviour
        return self.default


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.path == "/_fake/stats":
            self.send_json(200, self.server.fake.stats())
        else:
            self.send_json(404, {"error": {"message": f"no route GET {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fake = self.server.fake
        if self.path in ENDPOINTS:
            fake._serve_call(self, ENDPOINTS[self.path], raw)
        elif self.path.startswith("/_fake/"):
            try:
                answer = fake._control(self.path, json.loads(raw or b"{}"))
            except (ValueError, TypeError) as exc:
                self.send_json(400, {"error": {"message": str(exc)}})
            else:
                self.send_json(200, answer)
        else:
            self.send_json(404, {"error": {"message": f"no route POST {self.path}"}})

    def send_json(self, status: int, body: Any, extra: dict | None = None) -> None:
        self.send_bytes(status, "application/json", json.dumps(body).encode(), extra)

    def send_bytes(self, status: int, content_type: str, body: bytes, extra: dict | None = None,
                   declared: int | None = None) -> None:
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body) if declared is None else declared))
        self.send_header("Connection", "close")
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def abort(self) -> None:
        # SO_LINGER 0 turns the close into an RST; the real close happens when
        # the handler's file objects are released.
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


class _Listener(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, fake: FakeProviderServer, port: int) -> None:
        self.fake = fake
        super().__init__(("127.0.0.1", port), _Handler)
        self._thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fakeprovider", daemon=True)
        self._thread.start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that went away mid-answer is an expected event here

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


class FakeProviderServer:
    """The fake provider: start it, script it, read its counters, stop it."""

    def __init__(self, port: int = 0) -> None:
        self._requested_port = port
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._releases = 0
        self._stopped = threading.Event()
        self._state = _State()
        self._listener: _Listener | None = None
        self._listener_lock = threading.Lock()
        self._reopen: threading.Timer | None = None
        self.port = 0

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> FakeProviderServer:
        self._stopped.clear()
        with self._listener_lock:
            self._listener = _Listener(self, self._requested_port)
            self.port = self._listener.server_address[1]
        return self

    def stop(self) -> None:
        """Stop listening and wake every waiting handler; safe to call twice."""
        self._stopped.set()
        with self._wake:
            self._wake.notify_all()
        with self._listener_lock:
            if self._reopen is not None:
                self._reopen.cancel()
            if self._listener is not None:
                self._listener.stop()
                self._listener = None

    def __enter__(self) -> FakeProviderServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- scripting -----------------------------------------------------------

    def script(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next calls, in order."""
        with self._lock:
            self._state.queue.extend(behaviours)

    def set_default(self, behaviour: Behaviour) -> None:
        with self._lock:
            self._state.default = behaviour

    def honour_keys(self, on: bool = True) -> None:
        with self._lock:
            self._state.honour_keys = on

    def release(self) -> None:
        """Let every call currently held by a `hold` behaviour answer."""
        with self._wake:
            self._releases += 1
            self._wake.notify_all()

    def reset(self) -> None:
        """Forget scripts, counters and stored answers; accept connections again."""
        with self._lock:
            self._state = _State()
        self.accept_connections()

    def refuse_connections(self, seconds: float | None = None) -> None:
        """Close the listening socket (ECONNREFUSED); reopen after `seconds` if given."""
        with self._listener_lock:
            if self._listener is not None:
                self._listener.stop()
                self._listener = None
            if seconds is not None:
                self._reopen = threading.Timer(seconds, self.accept_connections)
                self._reopen.daemon = True
                self._reopen.start()

    def accept_connections(self) -> None:
        """Listen again on the same port (after `refuse_connections`)."""
        with self._listener_lock:
            if self._reopen is not None:
                self._reopen.cancel()
                self._reopen = None
            if self._listener is None and not self._stopped.is_set():
                self._listener = _rebind(self, self.port)

    # -- counters ------------------------------------------------------------

    def calls_for(self, key: str) -> Calls:
        with self._lock:
            return Calls(self._state.requests[key], self._state.executions[key])

    def max_in_flight(self, endpoint: str) -> int:
        with self._lock:
            return self._state.peak[endpoint]

    def in_flight(self, endpoint: str) -> int:
        with self._lock:
            return self._state.in_flight[endpoint]

    @property
    def recorded(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._state.log)

    def stats(self) -> dict:
        with self._lock:
            state = self._state
            keys = set(state.requests) | set(state.executions)
            return {
                "keys": {k: {"requests": state.requests[k], "executions": state.executions[k]} for k in keys},
                "requests_total": len(state.log),
                "executions_total": state.total_executions,
                "in_flight": {name: state.in_flight[name] for name in ENDPOINTS.values()},
                "max_in_flight": {name: state.peak[name] for name in ENDPOINTS.values()},
                "queued": len(state.queue),
                "honour_keys": state.honour_keys,
            }

    def _control(self, path: str, body: dict) -> dict:
        if path == "/_fake/reset" or body.get("reset"):
            self.reset()
        if path == "/_fake/release" or body.get("release"):
            self.release()
        if path == "/_fake/script":
            if "honour_keys" in body:
                self.honour_keys(bool(body["honour_keys"]))
            if "default" in body:
                self.set_default(Behaviour.from_json(body["default"]))
            self.script(*(Behaviour.from_json(item) for item in body.get("behaviours", [])))
            if body.get("refuse_seconds"):
                self.refuse_connections(float(body["refuse_seconds"]))
        elif path not in ("/_fake/reset", "/_fake/release"):
            raise ValueError(f"no control route {path}")
        return self.stats()

    # -- serving -------------------------------------------------------------

    def _serve_call(self, handler: _Handler, endpoint: str, raw: bytes) -> None:
        key = handler.headers.get("Idempotency-Key", "")
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        with self._lock:
            state = self._state
            state.log.append(RecordedRequest(endpoint, key, dict(handler.headers.items()), body))
            state.requests[key] += 1
            state.in_flight[endpoint] += 1
            state.peak[endpoint] = max(state.peak[endpoint], state.in_flight[endpoint])
            behaviour = state.next_behaviour(endpoint)
        try:
            refusal = _bad_request(endpoint, handler.headers, body)
            if refusal and behaviour.action in ("ok", "delay", "hold"):
                handler.send_json(refusal[0], {"error": {"message": refusal[1], "type": "invalid_request_error"}})
            else:
                self._perform(handler, endpoint, key, behaviour)
        finally:
            with self._lock:
                state.in_flight[endpoint] -= 1

    def _answer(self, endpoint: str, key: str, execute: bool) -> _Answer | None:
        """The answer for this call: a replay, a new execution, or None (not executed)."""
        with self._lock:
            state = self._state
            stored = state.answers.get((endpoint, key)) if key else None
            if state.honour_keys and stored is not None:
                return stored
            if not execute:
                return None
            state.executions[key] += 1
            state.total_executions += 1
            number = state.total_executions
        if endpoint == "image":
            png = base64.b64encode(tiny_png(number)).decode()
            payload = json.dumps({"created": int(time.time()), "data": [{"b64_json": png}]}).encode()
            answer = _Answer("application/json", payload, f"req_{number}")
        else:
            answer = _Answer("audio/wav", tiny_wav(number), f"req_{number}")
        with self._lock:
            if key:
                state.answers.setdefault((endpoint, key), answer)
        return answer

    def _perform(self, handler: _Handler, endpoint: str, key: str, behaviour: Behaviour) -> None:
        action = behaviour.action
        answer = self._answer(endpoint, key, behaviour.executes)
        if action == "status":
            extra = {} if behaviour.retry_after is None else {"Retry-After": behaviour.retry_after}
            message = behaviour.message or f"fake provider answered {behaviour.status}"
            handler.send_json(behaviour.status, {"error": {"message": message, "type": "fake"}}, extra)
        elif action == "hang":
            self._stopped.wait(behaviour.seconds or 30)
            handler.close_connection = True
        elif action == "drop":
            handler.close_connection = True
        elif action == "reset":
            handler.abort()
        else:
            if action == "delay":
                self._stopped.wait(behaviour.seconds)
            elif action == "hold":
                self._wait_for_release(behaviour.seconds or 30)
            assert answer is not None  # answering actions always execute or replay
            self._deliver(handler, endpoint, action, answer)

    def _deliver(self, handler: _Handler, endpoint: str, action: str, answer: _Answer) -> None:
        headers = {"x-request-id": answer.request_id}
        body, declared = answer.body, None
        if action == "bad_body":
            body = b'{"data": [not json'
        elif action == "bad_base64" and endpoint == "image":
            body = json.dumps({"data": [{"b64_json": "%%% not base64 %%%"}]}).encode()
        elif action == "truncate":
            body, declared = answer.body[: len(answer.body) // 2], len(answer.body)
        handler.send_bytes(200, answer.content_type, body, headers, declared)

    def _wait_for_release(self, timeout: float) -> None:
        with self._wake:
            seen = self._releases
            self._wake.wait_for(lambda: self._releases > seen or self._stopped.is_set(), timeout)


def _rebind(fake: FakeProviderServer, port: int) -> _Listener:
    # The port was ours a moment ago; a client socket may hold it briefly.
    deadline = time.monotonic() + 5
    while True:
        try:
            return _Listener(fake, port)
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _bad_request(endpoint: str, headers: Any, body: Any) -> tuple[int, str] | None:
    """What a real provider would refuse before doing any work, or None."""
    if not str(headers.get("Authorization", "")).startswith("Bearer "):
        return 401, "missing bearer token"
    field_name = "prompt" if endpoint == "image" else "input"
    if not isinstance(body, dict) or not body.get(field_name) or not body.get("model"):
        return 400, f"the JSON body needs 'model' and '{field_name}'"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the fake in the foreground: `python -m tests.fakeprovider [PORT]`."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    server = FakeProviderServer(int(args[0]) if args else 0).start()
    print(f"fake provider listening on {server.base_url}", flush=True)
    try:
        server._stopped.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
