"""The fake provider's HTTP server: scripting, counters, and serving calls.

See the package docstring for the behaviours and the control endpoints.
"""

from __future__ import annotations

import base64
import gzip
import json
import socket
import struct
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from . import contract
from .batch import BatchAPI, moderation, route, usage
from .behaviours import BATCH_STEPS, ENDPOINTS, Behaviour, Calls, RecordedRequest
from .media import tiny_image, tiny_wav

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
    today: date | None = None     # the day the catalogue's shutdowns are judged by (None: the real UTC date)
    requests: Counter = field(default_factory=Counter)
    executions: Counter = field(default_factory=Counter)
    answers: dict = field(default_factory=dict)
    in_flight: Counter = field(default_factory=Counter)
    peak: Counter = field(default_factory=Counter)
    log: list = field(default_factory=list)
    total_executions: int = 0

    def next_behaviour(self, endpoint: str) -> Behaviour:
        for behaviour in self.queue:
            if behaviour.endpoint == endpoint or (behaviour.endpoint is None and endpoint not in BATCH_STEPS):
                self.queue.remove(behaviour)
                return behaviour
        return self.default if endpoint not in BATCH_STEPS else Behaviour()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Listener

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def do_GET(self) -> None:
        if self.path == "/_fake/stats":
            self.send_json(200, self.server.fake.stats())
        elif self.path.startswith(("/v1/files", "/v1/batches")):
            self.server.fake._serve_batch(self, "GET", b"")
        else:
            self.send_json(*contract.refuse_path("GET", self.path))

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        fake = self.server.fake
        if self.path.startswith(("/v1/files", "/v1/batches")):
            fake._serve_batch(self, "POST", raw)
        elif self.path in ENDPOINTS:
            fake._serve_call(self, ENDPOINTS[self.path], raw)
        elif self.path.startswith("/_fake/"):
            try:
                answer = fake._control(self.path, json.loads(raw or b"{}"))
            except (ValueError, TypeError) as exc:
                self.send_json(400, {"error": {"message": str(exc)}})
            else:
                self.send_json(200, answer)
        else:
            self.send_json(*contract.refuse_path("POST", self.path))

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
        self.batch = BatchAPI(self._execute_line)
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

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until `stop()` (or the timeout); True once stopped."""
        return self._stopped.wait(timeout)

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

    def set_today(self, day: date | None) -> None:
        """Answer as the API will on `day`: a model whose shutdown date has come by then is refused (404)."""
        with self._lock:
            self._state.today = day

    def release(self) -> None:
        """Let every call currently held by a `hold` behaviour answer."""
        with self._wake:
            self._releases += 1
            self._wake.notify_all()

    def reset(self) -> None:
        """Forget scripts, counters, stored answers, files and batches; accept connections again."""
        with self._lock:
            self._state = _State()
            self.batch = BatchAPI(self._execute_line)
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
            if "today" in body:
                self.set_today(date.fromisoformat(body["today"]) if body["today"] else None)
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
        refusal = contract.refuse(endpoint, handler.headers, body, today=self._state.today) or (
            moderation(self.batch.script.refuse_word, body) if endpoint == "image" else None)
        with self._lock:
            state = self._state
            state.log.append(RecordedRequest(endpoint, key, dict(handler.headers.items()), body))
            state.requests[key] += 1
            state.in_flight[endpoint] += 1
            state.peak[endpoint] = max(state.peak[endpoint], state.in_flight[endpoint])
            # A refused call does nothing and consumes no scripted behaviour.
            behaviour = None if refusal else state.next_behaviour(endpoint)
        try:
            if refusal:
                handler.send_json(*refusal)
            else:
                self._perform(handler, endpoint, key, behaviour, body)
        finally:
            with self._lock:
                state.in_flight[endpoint] -= 1

    def _execute_line(self, custom_id: str) -> int:
        """A batch line runs: one execution of its key, counted with the synchronous calls'; its number."""
        with self._lock:
            self._state.executions[custom_id] += 1
            self._state.requests[custom_id] += 1
            self._state.total_executions += 1
            return self._state.total_executions

    def _serve_batch(self, handler: _Handler, method: str, raw: bytes) -> None:
        """The Files and Batch API: the step is done, then the scripted behaviour for it acts on the answer."""
        refusal = contract.refuse_auth(handler.headers)
        if refusal:
            handler.send_json(*refusal)
            return
        step, answer = route(self.batch, method, handler.path, handler.headers, raw)
        with self._lock:
            self._state.log.append(RecordedRequest(step or handler.path, "", dict(handler.headers.items()), None))
            behaviour = self._state.next_behaviour(step) if step else Behaviour()
        if behaviour.action == "hold":
            self._wait_for_release(behaviour.seconds or 30)
        elif behaviour.action == "drop":
            handler.close_connection = True
            return
        elif behaviour.action == "status":
            handler.send_json(*contract.error(behaviour.status, behaviour.message or "fake batch error",
                                              kind="fake_error"))
            return
        status, body = answer
        if isinstance(body, bytes):
            handler.send_bytes(status, "application/octet-stream", body)
        else:
            handler.send_json(status, body)

    def _answer(self, endpoint: str, key: str, execute: bool, body: dict) -> _Answer | None:
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
        answer = _make_answer(endpoint, number, body)
        with self._lock:
            if key:
                state.answers.setdefault((endpoint, key), answer)
        return answer

    def _perform(self, handler: _Handler, endpoint: str, key: str, behaviour: Behaviour, body: dict) -> None:
        action = behaviour.action
        answer = self._answer(endpoint, key, behaviour.executes, body)
        if action == "status":
            extra = {} if behaviour.retry_after is None else {"Retry-After": behaviour.retry_after}
            message = behaviour.message or f"fake provider answered {behaviour.status}"
            handler.send_json(*contract.error(behaviour.status, message, kind="fake_error"), extra)
        elif action == "hang":
            self._stopped.wait(behaviour.seconds or 30)
            handler.close_connection = True
        elif action == "drop":
            handler.close_connection = True
        elif action == "reset":
            handler.abort()
        elif action in ("trickle", "huge"):
            self._stream(handler, behaviour)
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
        elif action == "compressed":
            body, headers["Content-Encoding"] = gzip.compress(answer.body), "gzip"
        handler.send_bytes(200, answer.content_type, body, headers, declared)

    def _stream(self, handler: _Handler, behaviour: Behaviour) -> None:
        """trickle: one byte every `seconds`; huge: `size` bytes as fast as the client reads."""
        size = behaviour.size or (1 << 20 if behaviour.action == "trickle" else 300 * 10**6)
        handler.close_connection = True
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if behaviour.declare:
            handler.send_header("Content-Length", str(size))
        handler.send_header("Connection", "close")
        handler.end_headers()
        step, pause = (1, behaviour.seconds or 1.0) if behaviour.action == "trickle" else (1 << 20, 0.0)
        chunk = b" " * step
        sent = 0
        try:
            while sent < size and not self._stopped.is_set():
                handler.wfile.write(chunk[: size - sent])
                handler.wfile.flush()
                sent += step
                if pause:
                    self._stopped.wait(pause)
        except OSError:
            pass  # the client gave up: what the test expects of it

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


def _make_answer(endpoint: str, number: int, body: dict) -> _Answer:
    """Execution `number`'s answer, in the shape and format the request asked for."""
    if endpoint == "image":
        image = tiny_image(number, body.get("output_format", "png"))
        if body.get("model", "").startswith("dall-e") and body.get("response_format") != "b64_json":
            item = {"url": f"https://images.invalid/{number}.png"}  # DALL-E's default answer is a URL
        else:
            item = {"b64_json": base64.b64encode(image).decode()}
        answer = {"created": int(time.time()), "data": [item]}
        if contract.image_family(body.get("model", "")) == "gpt-image":   # GPT image answers report their tokens
            answer["usage"] = usage(body)
        payload = json.dumps(answer).encode()
        return _Answer("application/json", payload, f"req_{number}")
    audio_format = body.get("response_format", "mp3")
    audio = tiny_wav(number)
    content_type = "audio/wav" if audio_format == "wav" else f"audio/{audio_format}"
    # Only WAV is really encoded; other formats carry the tone's raw samples.
    return _Answer(content_type, audio if audio_format == "wav" else audio[44:], f"req_{number}")
