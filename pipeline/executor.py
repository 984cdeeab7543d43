"""The executor: the work of one attempt once it may go on, and for media the one paid call, bracketed by receipts.

`pipeline.attempt` claims the task, takes what its call needs (`pipeline.slots`), checks its lease and
hands it here with its `slots.Call`; the executor returns the stored asset or raises a classified error.
A media call: write the intent receipt (durable), call the provider outside any transaction, store the
asset file, write the result receipt (durable), and leave the call's ledger row in the `Call`, which the
attempt writes with its outcome. Anything that goes wrong before the intent receipt is `Transient` (the
provider was provably not called). After it, the provider's own classification holds, as the money rule
(`pipeline.core.policy.as_decided`) reads it: an `Ambiguous` answer from a provider that honours
idempotency keys is `Transient`.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol

import psycopg

from pipeline import bundle, storage
from pipeline.core import policy, prices
from pipeline.core.errors import ConfigError, PipelineError, ProviderError, Transient
from pipeline.core.records import Asset, Task
from pipeline.core.states import MEDIA_KINDS, MEDIUM, TaskKind
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
    """The configured provider of each media kind; ConfigError (naming the setting) when one cannot be built."""
    try:
        return {kind: build_provider(MEDIUM[kind], provider_config(getattr(cfg, kind)),
                                     journal_dir=cfg.media_dir / "provider-journal" / kind)
                for kind in MEDIA_KINDS}
    except ProviderConfigError as exc:
        raise ConfigError(str(exc)) from exc


def request_for(task: Task, seconds_left: float | None = None) -> GenerateRequest:
    data = task.input
    key = task.idempotency_key
    options = data.get("options") or {}
    if task.kind == "image":   # a regeneration's nonce asks a seeded renderer for another picture
        return GenerateRequest("image", data["prompt"], {"model": data["model"], "size": data["size"],
                                                         "theme": data.get("theme"), "options": options,
                                                         "variation": data.get("regeneration")},
                               key, seconds_left)
    return GenerateRequest(MEDIUM[task.kind], data["text"], {"model": data["model"], "voice": data["voice"],
                                                             "locale": data["locale"], "options": options},
                           key, seconds_left)


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
                 conn: Callable[[], psycopg.Connection]) -> None:
        self.cfg, self.providers, self.store, self.book, self.conn = cfg, providers, store, book, conn

    @classmethod
    def from_settings(cls, cfg: Settings, conn: Callable[[], psycopg.Connection]) -> "ProviderExecutor":
        """`conn`: the kept connection the bundle is read on (its Runtime's, fork-safe)."""
        return cls(cfg, build_providers(cfg), storage.media_store(cfg), storage.receipt_book(cfg), conn)

    def execute(self, task: Task, call: Call) -> Asset:
        if task.kind == TaskKind.BUNDLE:  # local work, nothing is paid: any failure may simply be retried
            try:
                with tempfile.TemporaryDirectory(prefix="mediapipe-bundle-") as work:
                    path = Path(work) / "bundle.zip"
                    bundle.build(self.conn(), self.store, task.content_id, task.version, path)
                    sha, size = self.store.put_file(path)
                return Asset(sha, "application/zip", size)
            except (psycopg.Error, OSError, PipelineError) as exc:
                raise Transient(f"could not build the bundle: {exc}") from exc
        request = request_for(task, seconds_left=(min(task.deadline_at, task.attempt_ends_at or task.deadline_at)
                                                  - datetime.now(timezone.utc)).total_seconds())
        return self._call(task, self.providers[task.kind], getattr(self.cfg, task.kind), request, call)

    def provider_name(self, kind: str) -> str:
        """The name the ledger uses for the provider of a task kind."""
        return self.providers[kind].name if kind in self.providers else kind

    def _call(self, task: Task, provider: Provider, settings: ProviderSettings, request: GenerateRequest,
              call: Call) -> Asset:
        try:
            self.book.write_intent(Intent(task.id, task.attempts, str(task.lease_token), provider.name,
                                          provider.model, task.fingerprint, request.idempotency_key, now()))
        except OSError as exc:   # a full disk, an unreachable bucket: no receipt, so no call
            raise Transient(f"could not write the intent receipt, so the provider was not called: {exc}") from exc
        started = time.monotonic()
        estimate = prices.estimate(settings, task.kind, task.input)
        record = dict(provider=provider.name, model=provider.model, idempotency_key=request.idempotency_key,
                      estimated_cost=estimate, list_cost=estimate)
        try:
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
        asset = keep_result(self.store, self.book, task.id, task.attempts, task.lease_token, result, elapsed)
        # The ledger row is written with the outcome (attempt_succeed, or slots.settle); the receipts are the durable
        # record of the call.
        # A key-honouring provider answers a retried key with the first result: one charge, booked once.
        figure = None if call.replay else prices.reported(settings, task.kind, task.input, result.metadata)
        call.ledger = dict(record, outcome="replayed" if call.replay else "succeeded", http_status=200,
                                 latency_ms=elapsed, reported_cost=figure, usage=result.metadata.get("usage"),
                                 cost=0.0 if call.replay else (estimate if figure is None else figure))
        return asset
