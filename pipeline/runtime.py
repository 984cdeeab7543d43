"""What a worker process keeps between jobs: settings, the executor, what each kind's call needs, and kept
connections.

RQ imports `pipeline.message.run_task` by dotted path; the job asks `current()` for
the process's runtime, built once from the environment (or installed by tests).
Connections are reopened when PostgreSQL restarted under them.

Connections belong to the process that opened them. The Procfile's workers are RQ
SimpleWorkers, which run every job in the worker process itself, so its connections
serve job after job. A forking RQ worker runs each job in a new work horse: there the
runtime opens connections of its own (every job) and leaves those inherited from the
parent alone, since closing them would end the parent's sessions.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Protocol

import psycopg
import redis

from pipeline import servers, slots, storage
from pipeline.core import kinds
from pipeline.executor import Executor
from pipeline.log import log
from pipeline.settings import Settings, load


class Beating(Protocol):
    def tick(self) -> None:
        """One heartbeat; it handles the errors it expects (an error it lets through is logged)."""


class Heartbeats:
    """One thread per worker process that beats for the attempts in progress, each every `every` seconds from
    the moment it is watched. A thread of its own per attempt cost its start and its join on every task.

    `forget` returns only once no beat of that attempt is running, so nothing beats for an attempt that ended
    (its kept lease connection then serves the next attempt alone).
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: dict[Beating, tuple[float, float]] = {}   # attempt -> (next beat, interval), monotonic
        self._beating: Beating | None = None
        self._thread: threading.Thread | None = None
        self._sleeps_until = math.inf   # when the waiting thread wakes on its own (inf: it waits for a watch)

    def watch(self, attempt: Beating, every: float) -> None:
        with self._cond:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="heartbeats", daemon=True)
                self._thread.start()
            due = time.monotonic() + every
            self._due[attempt] = (due, every)
            if due < self._sleeps_until:   # a later beat than the one it waits for is seen when it wakes
                self._cond.notify_all()

    def forget(self, attempt: Beating) -> None:
        with self._cond:
            self._due.pop(attempt, None)
            while self._beating is attempt:
                self._cond.wait()

    def _run(self) -> None:
        while True:
            with self._cond:
                attempt = self._beating = self._next_due()
            try:
                attempt.tick()
            except Exception as exc:  # noqa: BLE001 - one attempt's failed beat must not end the beats of all
                log("heartbeat_error", error=f"{exc.__class__.__name__}: {exc}"[:300])
            finally:
                with self._cond:
                    self._beating = None
                    if attempt in self._due:
                        every = self._due[attempt][1]
                        self._due[attempt] = (time.monotonic() + every, every)
                    self._cond.notify_all()

    def _next_due(self) -> Beating:
        """Wait (holding the condition) for the first attempt whose beat is due."""
        while True:
            if not self._due:
                self._sleeps_until = math.inf
                self._cond.wait()
                continue
            attempt, (due, _) = min(self._due.items(), key=lambda item: item[1][0])
            left = due - time.monotonic()
            if left <= 0:
                self._sleeps_until = -math.inf   # beating: a watch meanwhile is seen by the next look
                return attempt
            self._sleeps_until = due
            self._cond.wait(left)


@dataclass
class Runtime:
    settings: Settings
    executor: Executor
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    _conns: dict = field(default_factory=dict, repr=False)
    _redis: redis.Redis | None = field(default=None, repr=False)
    _pid: int = field(default_factory=os.getpid, repr=False)
    _receipt_store: str | None = field(default=None, repr=False)
    _heartbeats: Heartbeats | None = field(default=None, repr=False)
    stopping: Callable[[], bool] = field(default=lambda: False, repr=False)   # the worker was asked to stop
    calls: slots.CallPlans | None = field(default=None, repr=False)   # what each kind's call needs: `resolve_calls`

    def __post_init__(self) -> None:
        if self.executor is not None and self.calls is None:
            self.resolve_calls()

    def resolve_calls(self) -> None:
        """What each kind's call needs (`slots.CallPlan`), resolved once per process from the settings and the
        executor's name for each kind's provider; the claim, the slots and the settlement are given it."""
        self.calls = slots.plans(self.settings, {k.name: self.executor.provider_name(k.name) for k in kinds.every()})

    def _own(self) -> None:
        """After a fork: forget the parent's connections (kept referenced, never used or closed here) and
        its heartbeat thread (a thread does not live on in a forked child)."""
        if self._pid != os.getpid():
            _inherited.append((self._conns, self._redis))
            self._conns, self._redis, self._heartbeats, self._pid = {}, None, None, os.getpid()

    @property
    def heartbeats(self) -> Heartbeats:
        self._own()
        if self._heartbeats is None:
            self._heartbeats = Heartbeats()
        return self._heartbeats

    def conn(self, name: str = "main") -> psycopg.Connection:
        """A kept autocommit connection; each call of pipeline.tasks opens its own short transaction."""
        self._own()
        conn = self._conns.get(name)
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                conn.close()
            conn = self._conns[name] = servers.connect(self.settings)
        return conn

    def drop(self, name: str = "main") -> None:
        self._own()
        conn = self._conns.pop(name, None)
        if conn is not None:
            conn.close()

    @property
    def receipt_store(self) -> str | None:
        """The identity of the store this process writes its receipts to (recorded with each claim).

        None while the store cannot be read: the claim then names no store, the intent receipt fails
        to be written (so the provider is not called), and a reconciler treats the attempt as out of sight.
        """
        if self._receipt_store is None:
            try:
                self._receipt_store = storage.receipt_book(self.settings).store_id()
            except OSError as exc:   # StorageError is an OSError
                log("receipt_store_unreadable", error=f"{exc.__class__.__name__}: {exc}"[:300])
        return self._receipt_store

    @property
    def redis(self) -> redis.Redis:
        self._own()
        if self._redis is None:
            self._redis = servers.redis_client(self.settings)
        return self._redis

    def close(self) -> None:
        self._own()
        for name in list(self._conns):
            self.drop(name)


_current: Runtime | None = None
_inherited: list = []   # connections a parent opened before forking this process
_lock = threading.Lock()


def with_providers(settings: Settings, worker_id: str | None = None) -> Runtime:
    """A runtime whose executor calls the configured providers, on the runtime's own kept connection (so a worker
    process holds two connections in all: this one and the heartbeat's)."""
    from pipeline.executor import ProviderExecutor
    rt = Runtime(settings, None, **({"worker_id": worker_id} if worker_id else {}))
    rt.executor = ProviderExecutor.from_settings(settings, rt.conn, actor=rt.worker_id)
    rt.resolve_calls()
    return rt


def current() -> Runtime:
    global _current
    with _lock:
        if _current is None:
            _current = with_providers(load())
        return _current


def install(runtime: Runtime | None) -> None:
    """Use this runtime in this process (tests, benchmarks); None resets to the default."""
    global _current
    with _lock:
        if _current is not None and _current is not runtime:
            _current.close()
        _current = runtime
