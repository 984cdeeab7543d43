"""A webhook receiver for the tests and bench/: a real HTTP server on 127.0.0.1 that verifies every message with the
`standardwebhooks` reference library, as a consumer would, records it, and answers as scripted.

`answers` is a list of what to answer, in order (then 200): an HTTP status, or `HOLD` (keep the request open until
`release()`, then answer 200). Every request is recorded, verified or not, with what it was answered.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

HOLD = "hold"


@dataclass
class Received:
    webhook_id: str
    timestamp: str
    signature: str
    body: bytes
    verified: bool
    answered: int
    peer_port: int
    at: float = field(default_factory=time.monotonic)

    @property
    def headers(self) -> dict[str, str]:
        return {"webhook-id": self.webhook_id, "webhook-timestamp": self.timestamp,
                "webhook-signature": self.signature}

    @property
    def type(self) -> str | None:
        try:
            return json.loads(self.body)["type"]
        except (ValueError, KeyError):
            return None

    @property
    def data(self) -> dict:
        return json.loads(self.body)["data"]


class Receiver:
    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret
        self.answers: list = []
        self.received: list[Received] = []
        self.holding = threading.Event()   # set while a request is held
        self._release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:   # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                with receiver._lock:
                    answer = receiver.answers.pop(0) if receiver.answers else 200
                if answer == HOLD:
                    receiver.holding.set()
                    receiver._release.wait(60)
                    receiver.holding.clear()
                    answer = 200
                record = Received(self.headers.get("webhook-id", ""), self.headers.get("webhook-timestamp", ""),
                                  self.headers.get("webhook-signature", ""), body,
                                  receiver.verified(body, dict(self.headers.items())),
                                  answer, self.client_address[1])
                with receiver._lock:
                    receiver.received.append(record)
                try:
                    self.send_response(answer)
                    self.send_header("content-length", "2")
                    self.end_headers()
                    self.wfile.write(b"ok")
                except OSError:   # the sender is gone (a test killed it)
                    pass

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def verified(self, body: bytes, headers: dict[str, str]) -> bool:
        """Whether the reference library accepts this message under the receiver's secret."""
        if not self.secret:
            return False
        try:
            Webhook(self.secret).verify(body, headers)
            return True
        except WebhookVerificationError:
            return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hooks"

    def start(self) -> "Receiver":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._release.set()
        self.server.shutdown()
        self.server.server_close()

    def release(self) -> None:
        self._release.set()

    def script(self, *answers) -> None:
        with self._lock:
            self.answers = list(answers)
            self._release.clear()

    def messages(self, answered: int | None = 200) -> list[Received]:
        """What was received (answered with `answered`; None: everything), in order."""
        with self._lock:
            return [r for r in self.received if answered is None or r.answered == answered]

    def __enter__(self) -> "Receiver":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def send_webhooks(cfg) -> int:
    """Dispatch the due webhook messages and run them, in this process, with the webhook pool's worker class (RQ's
    SimpleWorker, in burst mode) and a sender of `cfg`; how many were dispatched."""
    import redis
    from rq import Queue

    from bin.worker import WebhookWorker
    from pipeline import webhook_delivery
    from pipeline.db import connect

    sender = webhook_delivery._current
    if sender is None or sender.cfg is not cfg:
        webhook_delivery.install(webhook_delivery.Sender(cfg, worker="test-webhook-worker"))
    conn_redis = redis.Redis.from_url(cfg.redis_url)
    with connect(cfg.database_url, autocommit=True) as conn:
        sent = webhook_delivery.send_due(conn, conn_redis, claim_seconds=2, lost_seconds=cfg.lost_dispatch_seconds)
    WebhookWorker([Queue(webhook_delivery.QUEUE, connection=conn_redis)], connection=conn_redis).work(
        burst=True, logging_level="WARNING")
    return sent
