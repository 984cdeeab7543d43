"""Sending webhook messages, at least once: the dispatcher's part and the webhook workers' job.

The messages (webhook_deliveries, one per event and endpoint) are the webhooks' outbox. The dispatcher
(pipeline/dispatch.py `send_due`) claims the due ones, enqueues one RQ message each on the `webhook` queue, which
only the webhook pool (the Procfile's worker-webhook) reads, and marks them sent: a slow receiver holds a webhook
worker, never a worker of a paid call. A webhook worker runs `deliver(delivery_id)`: it takes the message under a
lease (a duplicate RQ message, or one that comes before the retry time, takes nothing), signs it, sends it once
(pipeline/webhook_http.py), and in one transaction records the attempt and what it made of the message
(pipeline/core/webhooks.py `decide`): delivered, tried again later, or dead; a 410 also disables the endpoint.

Nothing is lost to a crash: a message enqueued but never taken (Redis lost it, the dispatcher died before its
mark) and a message taken by a worker that died mid-send are due again once LOST_DISPATCH_SECONDS passed and the
lease ran out; the next worker records the dead one's attempt as `lost` and sends again, with the same webhook-id.
Due times live in PostgreSQL, never in RQ.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
import uuid
from datetime import datetime, timezone

import psycopg
import redis
from rq import Queue
from rq.serializers import JSONSerializer

from pipeline import db, servers, tracing, webhook_http, webhooks
from pipeline.core import webhooks as rules
from pipeline.log import log
from pipeline.settings import Settings, load

QUEUE = "webhook"
JOB_FUNC = "pipeline.webhook_delivery.deliver"   # the one function the webhook pool runs (bin/worker.py)
LEASE_MARGIN = 5.0   # seconds a lease outlives its attempt's timeout (the host lookup and two short transactions)
OUTCOME_STATUS = {"delivered": "delivered", "retry": "pending", "dead": "dead", "gone": "dead"}


# -- the dispatcher's part --------------------------------------------------------------------

def send_due(conn: psycopg.Connection, conn_redis: redis.Redis, *, batch: int = 200, claim_seconds: float = 30.0,
             lost_seconds: float = 60.0) -> int:
    """Claim due messages, enqueue one RQ message each on the webhook queue, mark them sent; how many. A Redis
    error is raised after the claim: the claim runs out and the messages are claimed again."""
    token = uuid.uuid4()
    with conn.transaction():
        db.execute(conn, "outbox_commit_async")
        rows = db.all(conn, "webhook_deliveries_claim", {"claim_token": token, "claim_seconds": claim_seconds,
                                                         "lost_seconds": lost_seconds, "limit": batch})
    if not rows:
        return 0
    Queue(QUEUE, connection=conn_redis, serializer=JSONSerializer).enqueue_many(
        [Queue.prepare_data(JOB_FUNC, args=(row["id"],), job_id=f"webhook-{row['id']}-{row['send_attempts']}",
                            timeout=-1, result_ttl=60, failure_ttl=86_400, description=f"webhook {row['id']}")
         for row in rows])
    sent = db.all(conn, "webhook_deliveries_mark_sent", {"ids": [r["id"] for r in rows], "claim_token": token})
    log("webhooks_dispatched", delivery_ids=[r["id"] for r in rows])
    return len(sent)


# -- the webhook workers' job -----------------------------------------------------------------

class Sender:
    """What a webhook worker process keeps between jobs: its settings and one autocommit connection."""

    def __init__(self, cfg: Settings, worker: str | None = None) -> None:
        self.cfg = cfg
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.policy = rules.RetryPolicy(cfg.webhooks.backoff_base_seconds, cfg.webhooks.backoff_cap_seconds,
                                        cfg.webhooks.retry_seconds)
        self._conn: psycopg.Connection | None = None

    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed or self._conn.broken:
            self._conn = servers.connect(self.cfg)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()

    def deliver(self, delivery_id: int) -> str:
        """One attempt at one message; what became of it (`not_due` when there was nothing to take)."""
        lease = uuid.uuid4()
        conn = self.conn()
        with conn.transaction():
            row = db.one(conn, "webhook_deliveries_take", {
                "delivery_id": delivery_id, "lease_token": lease,
                "lease_seconds": self.cfg.webhooks.timeout_seconds + LEASE_MARGIN, "traced": tracing.on()})
            if row is not None and row["previous_lease"] is not None:
                self._record(conn, row, attempt=row["attempts"] - 1, started_at=row["now"], latency_ms=0,
                             http_status=None, outcome="lost",
                             error="the worker sending it stopped before it recorded an answer")
        if row is None:
            log("webhook_not_due", delivery_id=delivery_id)
            return "not_due"
        if row["disabled_at"] is not None:
            return self._settle(row, lease, webhook_http.Answer(None, 0, "the endpoint is disabled"),
                                rules.Decision("dead", None, "endpoint disabled"), row["now"])
        # in the trace of the save of the event's version (docs/tracing.md); the receiver is not sent our trace ids
        with tracing.span("webhook send", parent=row["traceparent"], client=True, attributes={
                "webhook.delivery_id": row["id"], "webhook.event_type": row["type"], "webhook.attempt": row["attempts"],
                "webhook.endpoint_id": row["endpoint_id"]}) as span:
            started_at = datetime.now(timezone.utc)
            answer = webhook_http.post(row["url"], *self._signed(row), timeout=self.cfg.webhooks.timeout_seconds,
                                       allowed=self.cfg.webhooks.allow_networks)
            if span is not None and answer.http_status is not None:
                span.set_attribute("http.response.status_code", answer.http_status)
            decision = rules.decide(answer.http_status, row["attempts"], row["window_start"],
                                    datetime.now(timezone.utc), self.policy, random.random())
            return self._settle(row, lease, answer, decision, started_at)

    def _signed(self, row: dict) -> tuple[bytes, dict[str, str]]:
        """The message's body and headers for this attempt: its id, now, and the endpoint's signatures."""
        event = {"id": row["event_id"], "type": row["type"], "team": row["team"], "content_id": row["content_id"],
                 "version": row["version"], "task_id": row["task_id"], "data": row["data"],
                 "created_at": row["event_created_at"]}
        body = rules.payload(event, self.cfg.webhooks.public_url)
        key = webhooks.secret_key(self.cfg)
        secrets = [rules.secret(key, row["secret_salt"])]
        if row["previous_salt"] and row["previous_until"] > row["now"]:
            secrets.append(rules.secret(key, row["previous_salt"]))
        return body, rules.headers(rules.message_id(row["id"]), int(time.time()), body, secrets)

    def _settle(self, row: dict, lease: uuid.UUID, answer: webhook_http.Answer, decision: rules.Decision,
                started_at: datetime) -> str:
        """Record the attempt and what it made of the message, in one transaction; a 410 disables the endpoint."""
        conn = self.conn()
        with conn.transaction():
            self._record(conn, row, attempt=row["attempts"], started_at=started_at, latency_ms=answer.latency_ms,
                         http_status=answer.http_status, outcome=decision.outcome, error=answer.error)
            settled = db.one(conn, "webhook_deliveries_settle", {
                "delivery_id": row["id"], "lease_token": lease, "status": OUTCOME_STATUS[decision.outcome],
                "http_status": answer.http_status, "error": answer.error, "available_at": decision.available_at,
                "reason": decision.reason})
            if decision.outcome == "gone":
                webhooks.disable_in(conn, row["endpoint_id"], actor="webhook worker",
                                    reason=f"answered 410 Gone to message {row['id']}")
        log("webhook_attempt", delivery_id=row["id"], endpoint_id=row["endpoint_id"], event_type=row["type"],
            attempt=row["attempts"], http_status=answer.http_status, outcome=decision.outcome,
            latency_ms=answer.latency_ms, next_at=decision.available_at, lease_lost=settled is None or None)
        return decision.outcome

    def _record(self, conn: psycopg.Connection, row: dict, *, attempt: int, started_at: datetime, latency_ms: int,
                http_status: int | None, outcome: str, error: str | None) -> None:
        db.execute(conn, "webhook_attempts_add", {
            "delivery_id": row["id"], "attempt": attempt, "started_at": started_at, "latency_ms": latency_ms,
            "http_status": http_status, "outcome": outcome, "error": error, "worker": self.worker})


_current: Sender | None = None
_lock = threading.Lock()


def current() -> Sender:
    """This process's sender, built once from the environment (or installed by a test)."""
    global _current
    with _lock:
        if _current is None:
            _current = Sender(load())
        return _current


def install(sender: Sender | None) -> None:
    """Use this sender in this process (tests, benchmarks); None resets to the default."""
    global _current
    with _lock:
        if _current is not None and _current is not sender:
            _current.close()
        _current = sender


def deliver(delivery_id: int) -> str:
    """The RQ job of the webhook queue: one attempt at one message."""
    return current().deliver(delivery_id)
