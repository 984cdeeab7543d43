"""The executor: the work of one attempt once it may go on, and for media the one paid call, bracketed by receipts.

`pipeline.attempt` claims the task, takes what its call needs (`pipeline.slots`), checks its lease and
hands it here with its `slots.Call`; the executor returns the stored asset or raises a classified error.
A media call: write the intent receipt (durable), call the provider outside any transaction, store the
asset file, write the result receipt (durable), and leave the call's ledger row in the `Call`, which the
attempt writes with its outcome. Anything that goes wrong before the intent receipt is `Transient` (the
provider was provably not called), but a store that refuses the receipt is `StorageUnavailable`: the task
waits for it without spending an attempt. After it, the provider's own classification holds, as the money rule
(`pipeline.core.policy.as_decided`) reads it: an `Ambiguous` answer from a provider that honours
idempotency keys is `Transient`. A paid result the store refuses is held in memory and stored again until
the attempt's end (`_keep`), then `ResultNotStored` (unknown).
"""

from __future__ import annotations

import importlib
import tempfile
import time
from dataclasses import fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Protocol

import psycopg

from pipeline import storage, tasks, tracing
from pipeline.core import kinds, policy, prices
from pipeline.core.errors import (ConfigError, PipelineError, ProviderError, ResultNotStored, StorageUnavailable,
                                  Transient)
from pipeline.core.records import Asset, Task, Work
from pipeline.slots import Call
from pipeline.settings import ProviderSettings, Settings
from providers.base import GenerateRequest, Provider, Result
from providers.errors import ProviderConfigError
from providers.registry import ProviderConfig, build_provider
from receipts.calls import Intent, ReceiptBook, now
from receipts.calls import ResultReceipt
from receipts.media import MediaStore


class Executor(Protocol):
    """Does the work of a claimed task whose attempt may go on: the stored asset, or a classified error."""

    def execute(self, task: Task, call: Call) -> Asset:
        """The work itself; a media call leaves its ledger row in `call` (also when it raises)."""

    def provider_name(self, kind: str) -> str:
        """The name the ledger and the call slots use for the provider of a task kind."""


def provider_config(p: ProviderSettings) -> ProviderConfig:
    """The adapter's part of a provider's settings: every field the two records share (the base URL when set)."""
    shared = {f.name: getattr(p, f.name) for f in fields(ProviderConfig) if f.name != "base_url"}
    return ProviderConfig(**shared, **({"base_url": p.base_url} if p.base_url else {}))


def build_providers(cfg: Settings) -> dict[str, Provider]:
    """The configured provider of each paid kind; ConfigError (naming the setting) when one cannot be built."""
    try:
        return {kind.name: build_provider(kind.medium, provider_config(cfg.providers[kind.name]),
                                          journal_dir=cfg.media_dir / "provider-journal" / kind.name)
                for kind in kinds.paid()}
    except ProviderConfigError as exc:
        raise ConfigError(str(exc)) from exc


def request_for(task: Task, kind: kinds.Kind, seconds_left: float | None = None) -> GenerateRequest:
    text, params = kind.request(task.input)
    return GenerateRequest(kind.medium, text, params, task.idempotency_key, seconds_left)


def keep_result(store: MediaStore, book: ReceiptBook, task_id: int, attempt: int, lease_token: object,
                result: Result, call_ms: int) -> Asset:
    """Store a call's result and write its result receipt (both durable); the asset it became.

    The executor keeps what its call returned; the reconciler keeps what a provider's lookup returned.
    """
    sha = store.put(result.data)
    asset = Asset.from_result(sha, result)
    book.write_result(ResultReceipt(task_id, attempt, str(lease_token), result.provider_request_id, sha, asset.size,
                                    asset.media_type, asset.width, asset.height, asset.duration_ms, call_ms, now()))
    return asset


class ProviderExecutor:
    def __init__(self, cfg: Settings, providers: dict[str, Provider], store: MediaStore, book: ReceiptBook,
                 conn: Callable[[], psycopg.Connection], actor: str = "worker") -> None:
        self.cfg, self.providers, self.store, self.book, self.conn = cfg, providers, store, book, conn
        self.actor = actor   # who the events this executor writes name (its worker)

    @classmethod
    def from_settings(cls, cfg: Settings, conn: Callable[[], psycopg.Connection],
                      actor: str = "worker") -> "ProviderExecutor":
        """`conn`: the kept connection the bundle is read on (its Runtime's, fork-safe)."""
        return cls(cfg, build_providers(cfg), storage.media_store(cfg), storage.receipt_book(cfg), conn, actor)

    def execute(self, task: Task, call: Call) -> Asset:
        kind = kinds.get(task.kind)
        if not kind.paid:
            return self._make(task, kind)
        request = request_for(task, kind, (min(task.deadline_at, task.attempt_ends_at or task.deadline_at)
                                           - datetime.now(timezone.utc)).total_seconds())
        return self._call(task, self.providers[task.kind], self.cfg.providers[task.kind], request, call)

    def _make(self, task: Task, kind: kinds.Kind) -> Asset:
        """Local work (the kind's `work`, called with a `Work` and the file to write; it answers the asset's media
        type and, for a picture or a sound, its size or length): nothing is paid, so any failure may simply be
        retried."""
        module, _, name = kind.work.partition(":")
        try:
            make = getattr(importlib.import_module(module), name)
            with tempfile.TemporaryDirectory(prefix=f"mediapipe-{kind.name}-") as folder:
                path = Path(folder) / kind.name
                made = make(Work(self.conn(), self.store, self.cfg, task), path)
                try:
                    sha, size = self.store.put_file(path)
                except OSError as exc:   # the store refuses: wait for it, spending no attempt
                    wait = storage.REFUSALS.refused(self.cfg, kind.name, exc)
                    raise StorageUnavailable(f"could not store the {kind.name}: {exc}", retry_after=wait) from exc
            return Asset(sha, made.media_type, size, made.width, made.height, made.duration_ms)
        except StorageUnavailable:
            raise
        except (psycopg.Error, OSError, ValueError, PipelineError) as exc:
            raise Transient(f"could not make the {kind.name}: {exc}") from exc

    def provider_name(self, kind: str) -> str:
        """The name the ledger uses for the provider of a task kind."""
        return self.providers[kind].name if kind in self.providers else kind

    def _call(self, task: Task, provider: Provider, settings: ProviderSettings, request: GenerateRequest,
              call: Call) -> Asset:
        try:
            with tracing.span("receipt intent", attributes={"task.id": task.id}):
                self.book.write_intent(Intent(task.id, task.attempts, str(task.lease_token), provider.name,
                                              provider.model, task.fingerprint, request.idempotency_key, now()))
        except OSError as exc:   # a full disk, a read-only directory, an unreachable bucket: no receipt, so no call
            wait = storage.REFUSALS.refused(self.cfg, "intent receipt", exc)
            raise StorageUnavailable(f"could not write the intent receipt, so the provider was not called: {exc}",
                                     retry_after=wait) from exc
        if storage.REFUSALS.count:   # the store takes writes again
            storage.REFUSALS.count = 0
        started = time.monotonic()
        estimate = prices.estimate(settings, task.kind, task.input)
        record = dict(provider=provider.name, model=provider.model, idempotency_key=request.idempotency_key,
                      estimated_cost=estimate, list_cost=estimate)
        try:
            with tracing.span("provider call", client=True, attributes={
                    "task.id": task.id, "task.kind": task.kind, "provider.name": provider.name,
                    "provider.model": provider.model}):
                result = provider.generate(request)
        except ProviderError as exc:
            elapsed = int((time.monotonic() - started) * 1000)
            charged = policy.may_have_charged(exc, replay=call.replay)
            call.ledger = dict(record, outcome=exc.ledger_outcome, http_status=exc.http_status,
                               latency_ms=elapsed, cost=estimate if charged else 0.0)
            decided = policy.as_decided(exc, honours_idempotency_key=settings.honours_idempotency_key)
            if decided is exc:
                raise
            raise decided from exc
        elapsed = int((time.monotonic() - started) * 1000)
        # The ledger row is written with the outcome (attempt_succeed, or slots.settle), whether or not the result
        # can be stored; the receipts are the durable record of the call.
        # A key-honouring provider answers a retried key with the first result: one charge, booked once.
        figure = None if call.replay else prices.reported(settings, task.kind, task.input, result.metadata)
        call.ledger = dict(record, outcome="replayed" if call.replay else "succeeded", http_status=200,
                                 latency_ms=elapsed, reported_cost=figure, usage=result.metadata.get("usage"),
                                 cost=0.0 if call.replay else (estimate if figure is None else figure))
        with tracing.span("receipt result", attributes={"task.id": task.id}):
            return self._keep(task, settings, result, elapsed)

    def _keep(self, task: Task, settings: ProviderSettings, result: Result, call_ms: int) -> Asset:
        """Store a paid call's result and its result receipt.

        While the store refuses, the result waits in this process's memory and is stored again after a capped,
        jittered backoff, until the attempt's end (`attempt_ends_at`, never past the deadline), the heartbeat
        keeping the lease and the input's hold meanwhile; a `storage_wait` event marks the task, so the attention
        list shows the store failing. Past the attempt's end, `ResultNotStored`: the task is unknown, never paid
        for again unasked, or, from a provider that honours idempotency keys, retried with the key that the provider
        answers with this same result."""
        end = min(task.deadline_at, task.attempt_ends_at or task.deadline_at)
        marked = False
        while True:
            try:
                asset = keep_result(self.store, self.book, task.id, task.attempts, task.lease_token, result, call_ms)
            except OSError as exc:
                wait = storage.REFUSALS.refused(self.cfg, "paid result", exc)
                marked = marked or self._mark_held(task, exc)
                if datetime.now(timezone.utc) + timedelta(seconds=wait) < end:
                    time.sleep(wait)   # the result is in memory only: try the store again, within the attempt
                    continue
                held = ResultNotStored(f"the provider answered (and may have charged), but its result could not be "
                                       f"stored before the attempt's end: {exc}")
                held.__cause__ = exc
                decided = policy.as_decided(held, honours_idempotency_key=settings.honours_idempotency_key)
                raise decided from (exc if decided is held else held)
            if storage.REFUSALS.count:
                storage.REFUSALS.count = 0
            return asset

    def _mark_held(self, task: Task, exc: OSError) -> bool:
        """Record that this attempt holds a paid result the store refused (a `storage_wait` event under its lease);
        False when PostgreSQL could not be told, so the next refusal tries again."""
        try:
            tasks.record_event(self.conn(), task, "storage_wait", actor=self.actor,
                               reason=f"a paid result waits in memory: the store refused it ({exc})",
                               details={"error_class": exc.__class__.__name__})
        except psycopg.Error:
            return False
        return True
