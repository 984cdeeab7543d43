"""The executor: the work of one attempt once it may go on, and for media the one paid call, bracketed by receipts.

`pipeline.attempt` claims the task, takes what its call needs (`pipeline.slots`), checks its lease and
hands it here with its kind's `slots.CallPlan` and its `slots.Call`; the executor answers what the work came to
(`Called`), or raises a classified error when no call was made. A media call: write the intent receipt (durable),
call the provider outside any transaction, store the asset file, write the result receipt (durable); its answer
carries the call's ledger row, which the attempt writes with its outcome, and the error the call ended in, if any.
Anything that goes wrong before the intent receipt is `Transient` (the provider was provably not called), but a
store that refuses the receipt is `StorageUnavailable`: the task waits for it without spending an attempt. After
it, the provider's own classification holds, as the money rule (`pipeline.core.policy.as_decided`) reads it: an
`Ambiguous` answer from a provider that honours idempotency keys is `Transient`. A paid result the store refuses
is held in memory and stored again until the attempt's end (`_keep`), then `ResultNotStored` (unknown).
"""

from __future__ import annotations

import importlib
import tempfile
import time
from dataclasses import dataclass, fields
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Protocol

import psycopg

from pipeline import storage, tasks, tracing
from pipeline.core import kinds, policy, prices
from pipeline.core.errors import (ConfigError, PipelineError, ProviderError, ResultNotStored, StorageUnavailable,
                                  Transient)
from pipeline.core.records import Asset, Task, Work
from pipeline.slots import Call, CallPlan
from pipeline.settings import ProviderSettings, Settings
from providers.base import GenerateRequest, Provider, Result
from providers.errors import ProviderConfigError
from providers.registry import ProviderConfig, build_provider
from receipts.calls import Intent, ReceiptBook, now
from receipts.calls import ResultReceipt
from receipts.media import MediaStore


@dataclass(frozen=True)
class Called:
    """What a claimed task's work came to: its asset, and for a media call that was made its ledger row and the
    error it ended in (then no asset)."""

    asset: Asset | None = None
    ledger: dict | None = None           # the call's ledger row, once the provider was called
    error: BaseException | None = None   # the classified error, raised by the attempt once it has the ledger row


class Executor(Protocol):
    """Does the work of a claimed task whose attempt may go on: what it came to, or a classified error when no
    call was made."""

    def execute(self, task: Task, plan: CallPlan, call: Call | None) -> Called:
        """The work itself (`call`: what the paid call took; None for local work)."""

    def provider_name(self, kind: str) -> str:
        """The name the ledger and the call slots use for the provider of a task kind (asked once per kind, when
        the runtime resolves what each kind's call needs: `slots.plans`)."""


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


def _decided(exc: ProviderError, settings: ProviderSettings) -> ProviderError:
    """The provider's error as the money rule reads it (`policy.as_decided`), caused by the provider's own when it
    differs, so `policy.unpaid` still sees that the call may have been charged."""
    decided = policy.as_decided(exc, honours_idempotency_key=settings.honours_idempotency_key)
    if decided is not exc:
        decided.__cause__ = exc   # as `raise decided from exc`
    return decided


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

    def execute(self, task: Task, plan: CallPlan, call: Call | None) -> Called:
        if not plan.paid:
            return Called(self._make(task, plan.kind))
        request = request_for(task, plan.kind, (min(task.deadline_at, task.attempt_ends_at or task.deadline_at)
                                                - datetime.now(timezone.utc)).total_seconds())
        return self._call(task, self.providers[task.kind], plan, request, call)

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

    def _call(self, task: Task, provider: Provider, plan: CallPlan, request: GenerateRequest, call: Call) -> Called:
        """The paid call bracketed by its receipts; raises only before the provider is called (nothing owed)."""
        settings = plan.settings
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
        estimate = plan.estimate(task.input)
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
            return Called(ledger=dict(record, outcome=exc.ledger_outcome, http_status=exc.http_status,
                                      latency_ms=elapsed, cost=estimate if charged else 0.0),
                          error=_decided(exc, settings))
        elapsed = int((time.monotonic() - started) * 1000)
        # The ledger row is written with the outcome (attempt_succeed, or slots.settle), whether or not the result
        # can be stored; the receipts are the durable record of the call.
        # A key-honouring provider answers a retried key with the first result: one charge, booked once.
        figure = None if call.replay else prices.reported(settings, task.kind, task.input, result.metadata)
        ledger = dict(record, outcome="replayed" if call.replay else "succeeded", http_status=200,
                      latency_ms=elapsed, reported_cost=figure, usage=result.metadata.get("usage"),
                      cost=0.0 if call.replay else (estimate if figure is None else figure))
        try:
            with tracing.span("receipt result", attributes={"task.id": task.id}):
                return Called(self._keep(task, settings, result, elapsed), ledger)
        except BaseException as exc:   # noqa: BLE001 - the call was made: whatever ends the attempt, it owes its row
            return Called(ledger=ledger, error=exc)

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
