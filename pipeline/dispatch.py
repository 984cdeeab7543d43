"""The outbox dispatcher: PostgreSQL outbox rows become RQ messages.

Claim due rows (SKIP LOCKED, a claim token, a short claim lease) and commit;
enqueue RQ jobs carrying only task ids, one per row unless the queue holds a backlog
(`lanes.tasks_per_message`: then up to eight rows' tasks per job); then mark the rows sent
where the claim token still matches. A crash between enqueue and mark leaves the
rows to be claimed again after the claim lease: a duplicate message, which the
task claim turns into a no-op. For the same reason neither commit waits for its
WAL flush: a claim or a mark lost in a crash only means a message sent again. Due times live in the outbox, never in RQ.

Each row goes to its kind's queue in its lane (pipeline/core/lanes.py). Interactive rows
are sent as soon as they are due, also by the fast path after a commit. Bulk rows
are sent only by `send_bulk`: it keeps at most `bulk_depth` messages waiting in each
bulk queue and fills the free places one turn per content, least recently served
content first, so contents take turns and one import cannot starve a later one.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Mapping, Sequence

import psycopg
from psycopg.types.json import Jsonb
import redis
from rq import Queue
from rq.job import Job
from rq.serializers import JSONSerializer
from rq.worker_registration import WORKERS_BY_QUEUE_KEY

from pipeline import db, tracing, webhook_delivery
from pipeline.core import kinds
from pipeline.core.lanes import BULK, INTERACTIVE, bulk_depths, queue_name, tasks_per_message
from pipeline.log import log
from pipeline.settings import Settings

JOB_FUNC = "pipeline.message.run_task"   # the one function a message may name (bin/worker.py refuses any other)
SERIALIZER = JSONSerializer           # never pickle: a pickle in Redis would run code on every worker that reads it
STUCK_AFTER = 3   # send attempts after which an unsent row counts as stuck (/metrics: mediapipe_outbox_stuck)
RESULT_TTL = 60   # seconds a finished RQ job's record is kept (PostgreSQL holds the outcome)


class MessageJob(Job):
    """The job class our messages are read with (the workers', bin/rq's): RQ's, less the callbacks. Whatever a job's
    hash in Redis names as a success, failure or stopped callback, no process of ours imports or calls it. RQ reads
    those names back from Redis and calls them after a job, and also when it cleans up a job it finds abandoned (a
    worker's registry maintenance, `rq info`), where the workers' refusal of foreign messages never looks. Our
    messages name none, so nothing is lost."""

    @property
    def success_callback(self):
        return None

    @property
    def failure_callback(self):
        return None

    @property
    def stopped_callback(self):
        return None


JOB_CLASS = f"{MessageJob.__module__}.{MessageJob.__qualname__}"


def enqueue(conn_redis: redis.Redis, rows: Iterable[dict]) -> None:
    """RQ jobs for outbox rows, in one Redis round trip, each to its kind's queue in its lane; a job carries one
    row's task, or several rows' tasks when the queue holds a backlog (`_message_sizes`).

    RQ's own retry stays off. A row without a lane is interactive. A finished job's record stays in
    Redis for RESULT_TTL seconds: with 0, RQ deletes it at once, which costs the worker several extra
    round trips and a scan of the job's whole queue per job (docs/performance.md).
    """
    by_queue = _by_queue(rows)
    if not by_queue:
        return
    sizes = _message_sizes(conn_redis, by_queue)
    with conn_redis.pipeline() as pipe:
        for name, group in by_queue.items():
            Queue(name, connection=conn_redis, serializer=SERIALIZER).enqueue_many(
                [_message(part) for part in _split(group, sizes[name])], pipeline=pipe)
        pipe.execute()


def _message(rows: Sequence[dict]):
    """One message: the rows' task ids; its id names the first task and row (and how many more it carries)."""
    ids = tuple(row["task_id"] for row in rows)
    more = f"-and-{len(ids) - 1}" if len(ids) > 1 else ""
    return _job(ids, f"task-{ids[0]}-{rows[0]['id']}{more}")


def _job(task_ids: Sequence[int], job_id: str):
    return Queue.prepare_data(JOB_FUNC, args=tuple(task_ids), job_id=job_id, timeout=-1, result_ttl=RESULT_TTL,
                              failure_ttl=86_400, description="task " + " ".join(str(i) for i in task_ids))


def _split(rows: Sequence[dict], size: int) -> list[Sequence[dict]]:
    """Rows in order, in as few parts of at most `size` as there can be, their lengths differing by one at most."""
    parts = -(-len(rows) // size)
    each, extra = divmod(len(rows), parts)
    bounds = [i * each + min(i, extra) for i in range(parts + 1)]
    return [rows[bounds[i]:bounds[i + 1]] for i in range(parts)]


def _message_sizes(conn_redis: redis.Redis, by_queue: Mapping[str, Sequence[dict]]) -> dict[str, int]:
    """Tasks per message for each queue (`lanes.tasks_per_message`), from the messages waiting in it and the
    workers RQ has registered on it: one more round trip, made only for interactive queues given several rows."""
    sizes = dict.fromkeys(by_queue, 1)
    asked = [name for name, group in by_queue.items() if len(group) > 1 and _lane(group[0]) == INTERACTIVE]
    if not asked:
        return sizes
    with conn_redis.pipeline(transaction=False) as pipe:
        for name in asked:
            pipe.llen(_queue_key(name))
            pipe.scard(WORKERS_BY_QUEUE_KEY % name)
        answers = pipe.execute()
    for i, name in enumerate(asked):
        sizes[name] = tasks_per_message(INTERACTIVE, answers[2 * i], len(by_queue[name]), answers[2 * i + 1])
    return sizes


def hand_back(conn_redis: redis.Redis, queue: str, task_ids: Sequence[int], job_id: str, *,
              only_if_idle: bool = False) -> bool:
    """Put tasks a job carried but did not start back in its queue, a message each; with `only_if_idle`, only when
    the queue holds no other message (idle workers then share them). Whether they went back; Redis out of reach:
    False, and the job keeps them. Their outbox rows are sent: a message lost here is sent again by the
    reconciler, as any lost message is."""
    try:
        if only_if_idle and conn_redis.llen(_queue_key(queue)):
            return False
        Queue(queue, connection=conn_redis, serializer=SERIALIZER).enqueue_many(
            [_job((task_id,), f"task-{task_id}-from-{job_id}") for task_id in task_ids])
    except redis.RedisError as exc:
        log("hand_back_failed", queue=queue, task_ids=list(task_ids), rq_job_id=job_id, error=exc.__class__.__name__)
        return False
    log("handed_back", queue=queue, task_ids=list(task_ids), rq_job_id=job_id)
    return True


def _queue_key(name: str) -> str:
    """The Redis list of an RQ queue's waiting messages."""
    return Queue.redis_queue_namespace_prefix + name


def _lane(row: dict) -> str:
    return row.get("lane") or INTERACTIVE


def _by_queue(rows: Iterable[dict]) -> dict[str, list[dict]]:
    """Outbox rows by the RQ queue they go to: their kind's queue in their lane (none: interactive)."""
    by_queue: dict[str, list[dict]] = {}
    for row in rows:
        by_queue.setdefault(queue_name(row["queue"], _lane(row)), []).append(row)
    return by_queue


@dataclass(frozen=True)
class ClaimedMessages:
    """Outbox rows claimed by the transaction that wrote them (a save's runnable tasks), to be sent right
    after its commit without a claim of their own. It iterates over the rows' ids, like a list of them."""

    token: uuid.UUID
    rows: tuple[dict, ...]

    def __iter__(self) -> Iterator[int]:
        return (row["id"] for row in self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _send(conn: psycopg.Connection, conn_redis: redis.Redis, claim_query: str, params: dict,
          claim_seconds: float) -> int:
    token = uuid.uuid4()
    with conn.transaction(), conn.pipeline():
        db.execute(conn, "outbox_commit_async")
        rows = db.all(conn, claim_query, {**params, "claim_token": token, "claim_seconds": claim_seconds})
    return _deliver(conn, conn_redis, rows, token)


def _deliver(conn: psycopg.Connection, conn_redis: redis.Redis, rows: Sequence[dict], token: uuid.UUID) -> int:
    """Enqueue rows held under the claim `token`, then mark them sent where the claim still holds (one statement
    that commits on its own: `conn` is in autocommit mode, as every sender's connection is)."""
    if not rows:
        return 0
    with _traced(conn, rows):
        return _enqueue_and_mark(conn, conn_redis, rows, token)


def _traced(conn: psycopg.Connection, rows: Sequence[dict]) -> contextlib.ExitStack:
    """The spans of the rows' send (docs/tracing.md), entered: one in the current trace (a save's or a task's own
    send), else one in each trace the rows' versions' saves began (the dispatcher's sends). Nothing when off."""
    spans = contextlib.ExitStack()
    if not tracing.on():
        return spans
    attributes = {"outbox.ids": [r["id"] for r in rows], "task.ids": [r["task_id"] for r in rows]}
    parents: set[str | None] = {None}
    if tracing.traceparent() is None:   # no trace here: carry on those the saves began
        found = db.all(conn, "versions_traceparents", {"task_ids": [r["task_id"] for r in rows]})
        parents = {row["traceparent"] for row in found} or {None}
    for parent in parents:
        spans.enter_context(tracing.span("outbox send", parent=parent, attributes=attributes))
    return spans


def _enqueue_and_mark(conn: psycopg.Connection, conn_redis: redis.Redis, rows: Sequence[dict],
                      token: uuid.UUID) -> int:
    try:
        enqueue(conn_redis, rows)
    except redis.RedisError as exc:
        # the claims run out and the rows are tried again; each try is counted on the row
        stuck = [r["id"] for r in rows if r["send_attempts"] >= STUCK_AFTER]
        log("dispatch_failed", outbox_ids=[r["id"] for r in rows], error=exc.__class__.__name__,
            most_attempts=max(r["send_attempts"] for r in rows), stuck=stuck or None)
        raise
    sent = db.all(conn, "outbox_mark_sent", {"ids": [r["id"] for r in rows], "claim_token": token})
    # one line per queue; a job's id is task-<its first task id>-<that row's id>[-and-<how many more tasks>]
    for name, group in _by_queue(rows).items():
        log("dispatched", queue=name, task_ids=[r["task_id"] for r in group], outbox_ids=[r["id"] for r in group])
    return len(sent)


def send_due(conn: psycopg.Connection, conn_redis: redis.Redis, *, batch: int = 200,
             claim_seconds: float = 30.0, bulk_depth: Mapping[str, int] | None = None,
             lost_seconds: float = 60.0) -> int:
    """Send one batch of due interactive rows, then fill the bulk queues' free places, then one batch of due
    webhook messages (pipeline/webhook_delivery.py); how many were sent."""
    sent = _send(conn, conn_redis, "outbox_claim", {"limit": batch}, claim_seconds)
    sent += send_bulk(conn, conn_redis, depth=bulk_depth or bulk_depths(Settings()), claim_seconds=claim_seconds)
    return sent + webhook_delivery.send_due(conn, conn_redis, batch=batch, claim_seconds=claim_seconds,
                                            lost_seconds=lost_seconds)


def _bulk_room(conn_redis: redis.Redis, depth: Mapping[str, int]) -> dict[str, int]:
    """Free places per bulk queue, by kind: its depth minus the messages waiting in it."""
    names = kinds.names()
    with conn_redis.pipeline(transaction=False) as pipe:
        for kind in names:
            pipe.llen(_queue_key(queue_name(kind, BULK)))
        waiting = dict(zip(names, pipe.execute()))
    return {kind: max(0, depth.get(kind, 0) - waiting[kind]) for kind in names}


def send_bulk(conn: psycopg.Connection, conn_redis: redis.Redis, *, depth: Mapping[str, int],
              claim_seconds: float = 30.0) -> int:
    """Top each bulk queue up to `depth[kind]` waiting messages, contents taking turns.

    One dispatcher at a time (a session advisory lock held from reading the queue lengths to
    the enqueue), so several dispatchers never fill the same free places twice. Full queues
    (the usual state during an import) cost one Redis round trip and nothing in PostgreSQL.
    """
    if not any(_bulk_room(conn_redis, depth).values()):
        return 0
    if not db.one(conn, "outbox_bulk_try_lock")["locked"]:
        return 0
    try:
        room = _bulk_room(conn_redis, depth)   # again, under the lock: another dispatcher may just have filled it
        if not any(room.values()):
            return 0
        return _send(conn, conn_redis, "outbox_claim_bulk", {"room": Jsonb(room)}, claim_seconds)
    finally:
        if not conn.broken and not conn.closed:
            db.execute(conn, "outbox_bulk_unlock")


def send_now(conn: psycopg.Connection, conn_redis: redis.Redis, outbox_ids: Iterable[int] | ClaimedMessages,
             *, claim_seconds: float = 30.0) -> int:
    """Fast path after a commit: send these rows at once if they are interactive (bulk rows wait for
    `send_bulk`); rows their own transaction claimed (ClaimedMessages) are sent under that claim. Redis trouble
    leaves them for the dispatcher (a claim made with the rows runs out like any other)."""
    ids = list(outbox_ids)
    if not ids:
        return 0
    try:
        if isinstance(outbox_ids, ClaimedMessages):
            return _deliver(conn, conn_redis, outbox_ids.rows, outbox_ids.token)
        return _send(conn, conn_redis, "outbox_claim_ids", {"ids": ids}, claim_seconds)
    except redis.RedisError as exc:
        log("fast_path_deferred", outbox_ids=ids, error=exc.__class__.__name__)
        return 0


def run_forever(connect: Callable[[], psycopg.Connection], conn_redis: redis.Redis, *, idle_sleep: float = 0.2,
                claim_seconds: float = 30.0, should_stop: Callable[[], bool] = lambda: False,
                bulk_depth: Mapping[str, int] | None = None,
                scan: Callable[[psycopg.Connection], object] | None = None, scan_every: float = 5.0,
                lost_seconds: float = 60.0) -> None:
    """The long-running dispatcher: send batches while there are due rows, else nap briefly; every
    `scan_every` seconds, `scan` (the reconciler's recovery scans) on the same connection."""
    conn = None
    scanned = time.monotonic()
    while not should_stop():
        try:
            if conn is None or conn.closed or conn.broken:
                conn = connect()
            if scan is not None and time.monotonic() - scanned >= scan_every:
                scanned = time.monotonic()
                scan(conn)
            if send_due(conn, conn_redis, claim_seconds=claim_seconds, bulk_depth=bulk_depth,
                        lost_seconds=lost_seconds) == 0:
                time.sleep(idle_sleep)
        except (psycopg.OperationalError, redis.RedisError) as exc:
            log("dispatcher_waiting", error=f"{exc.__class__.__name__}: {exc}"[:300])
            time.sleep(1.0)
