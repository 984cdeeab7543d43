"""A controllable fake of an OpenAI-compatible provider, as a real HTTP server.

It listens on 127.0.0.1 (port 0 picks a free port) and speaks
`POST /v1/images/generations` (answers a small real PNG, JPEG or WebP as
b64_json) and `POST /v1/audio/speech` (answers a small real WAV).

It is strict: before doing anything it refuses what the real OpenAI API refuses
(`contract.py`, each rule with its place in the API reference): a missing
Bearer key, unknown parameters, unknown models, `response_format` for the GPT
image models, missing `model`/`prompt`/`input`/`voice`, a path it does not
serve. A refused call is counted as a request, never executed, and consumes no
scripted behaviour. The picture's colour and
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
    trickle     200, then the body one byte every `seconds` (default 1)
    huge        200 with `size` bytes (default 300 MB), Content-Length sent unless `declare` is false
    compressed  the normal answer gzip-compressed, although the client asked for identity

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

from .behaviours import ACTIONS, ENDPOINTS, Behaviour, Calls, RecordedRequest
from .media import tiny_image, tiny_png, tiny_wav
from .server import FakeProviderServer

__all__ = ["ACTIONS", "ENDPOINTS", "Behaviour", "Calls", "FakeProviderServer", "RecordedRequest",
           "tiny_image", "tiny_png", "tiny_wav"]
