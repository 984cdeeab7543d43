"""The executor: the work of one attempt, and for media the one paid call, bracketed by receipts.

`pipeline.jobs` claims a task and hands it here; the executor returns the stored asset or
raises a classified error, and `pipeline.tasks` applies what the retry policy makes of it.
Order of a media attempt: take a provider slot and a rate token and book the call's cost
(`prepare`, inside the claim's transaction; else Busy or BudgetReached), check the attempt
(`Attempt.check`: lease held, version not cancelled; a read unless the lease needs renewing),
write the intent receipt (durable), call the provider outside any transaction, store the
asset file, write the result receipt (durable). The call's ledger row and the slot's release
are left in the attempt's `Settlement`, written in the transaction that applies the outcome.
Anything that goes wrong before the intent receipt is `Transient` (the provider was
provably not called). After it, the provider's own classification holds, as the money
rule (`pipeline.core.policy.as_decided`) reads it: an `Ambiguous` answer from a provider
that honours idempotency keys is `Transient`. A booking is given back only when the error
proves the call cost nothing (`policy.unpaid`).
"""

from __future__ import annotations

import tempfile
import time
import uuid
from contextlib import nullcontext
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Protocol

import psycopg

from pipeline import bundle, db, ledger, servers, spend, storage
from pipeline.core import policy
from pipeline.core.errors import Busy, ConfigError, PipelineError, ProviderError, SlotsBusy, Transient
from pipeline.core.fingerprint import idempotency_key
from pipeline.core.records import Asset, Task
from pipeline.core.states import MEDIA_KINDS
from pipeline.lanes import BULK, INTERACTIVE
from pipeline.log import log
from pipeline.settings import ProviderSettings, Settings
from providers.base import GenerateRequest, Provider, Result
from providers.errors import ProviderConfigError
from providers.registry import ProviderConfig, build_provider
from receipts.calls import Intent, ReceiptBook, now
from receipts.calls import Outcome as ResultReceipt
from receipts.media import MediaStore

PROVIDER_KIND = {"image": "image", "tts": "audio"}


@dataclass
class Settlement:
    """What one attempt took before its call and owes after it: the provider slot it holds (released)
    and the call's ledger row (written). Both are written in the transaction that applies the attempt's
    outcome (`write`), or on their own when that transaction did not commit (`settle_alone`)."""

    task: Task
    provider: str | None = None          # the slot's provider name (Limits), None when no slot is held
    slot: int | None = None
    holder: uuid.UUID | None = None      # the attempt's lease token
    bulk_slots: int = 0                  # of the provider's slots, how many the bulk lane may hold (for the wake)
    booking: spend.Booking | None = None
    replay: bool = False
    ledger: dict | None = None           # the call's ledger row, once the call was made
    settled: bool = False
    prepared: bool = False               # the executor's `prepare` took what the call needs
    woken: list[int] = field(default_factory=list)   # outbox rows of the slot waiters the release woke

    def write(self, conn: psycopg.Connection) -> None:
        """Release the slot (waking the waiters it lets run), write the ledger row and settle the booking to the
        reported cost, in the caller's transaction."""
        if self.ledger is not None:
            ledger.record_call(conn, self.task, **self.ledger)
            if self.booking is not None and self.ledger.get("reported_cost") is not None:
                spend.settle(conn, self.booking, self.ledger["reported_cost"])
        if self.slot is not None:
            db.execute(conn, "provider_slots_release", {"provider": self.provider, "slot": self.slot,
                                                        "holder": self.holder})
            self.woken = [r["outbox_id"] for r in db.all(conn, "provider_slots_wake", {
                "kind": self.task.kind, "provider": self.provider, "bulk_slots": self.bulk_slots})]

    def committed(self) -> None:
        self.settled = True

    def settle_alone(self, connect: Callable[[], psycopg.Connection]) -> None:
        """After an outcome that did not commit (a lost lease, a database error): settle on our own."""
        if self.settled or (self.ledger is None and self.slot is None):
            return
        try:
            conn = connect()
            with conn.transaction():
                self.write(conn)
            self.settled = True
        except psycopg.Error as exc:   # the slot frees itself at held_until; the receipts keep the call
            log("settlement_failed", task_id=self.task.id, error=exc.__class__.__name__,
                ledger=self.ledger is not None)


class Attempt(Protocol):
    """What the executor needs of the attempt it works for (`pipeline.jobs.AttemptContext`)."""

    settlement: Settlement

    def check(self) -> None:
        """Raise LeaseLost or Cancelled when the attempt must stop now (else Transient if it cannot tell)."""


class Executor(Protocol):
    """Does one attempt of a claimed task: the stored asset, or a classified error."""

    def execute(self, task: Task, attempt: Attempt) -> Asset:
        ...


def slots_of(provider_name: str, kind: str) -> str:
    """The name a provider's call slots go by for one task kind (`provider_slots.provider`)."""
    return f"{provider_name}:{kind}"


def batched(cfg: Settings, task: Task) -> bool:
    """Whether the task's call goes into a Batch API job (IMAGE_BULK_BACKEND=batch, a bulk-lane image)."""
    return cfg.image_bulk_backend == "batch" and task.kind == "image" and task.lane == "bulk"


def provider_config(p: ProviderSettings) -> ProviderConfig:
    """The adapter's part of a provider's settings: every field the two records share (the base URL when set)."""
    shared = {f.name: getattr(p, f.name) for f in fields(ProviderConfig) if f.name != "base_url"}
    return ProviderConfig(**shared, **({"base_url": p.base_url} if p.base_url else {}))


def build_providers(cfg: Settings) -> dict[str, Provider]:
    """The configured provider of each media kind; ConfigError (naming the setting) when one cannot be built."""
    try:
        return {kind: build_provider(PROVIDER_KIND[kind], provider_config(getattr(cfg, kind)),
                                     journal_dir=cfg.media_dir / "provider-journal" / kind)
                for kind in MEDIA_KINDS}
    except ProviderConfigError as exc:
        raise ConfigError(str(exc)) from exc


def request_for(task: Task, seconds_left: float | None = None) -> GenerateRequest:
    data = task.input
    key = idempotency_key(task.fingerprint, task.id)
    options = data.get("options") or {}
    if task.kind == "image":   # a regeneration's nonce asks a seeded renderer for another picture
        return GenerateRequest("image", data["prompt"], {"model": data["model"], "size": data["size"],
                                                         "theme": data.get("theme"), "options": options,
                                                         "variation": data.get("regeneration")},
                               key, seconds_left)
    return GenerateRequest("audio", data["text"], {"model": data["model"], "voice": data["voice"],
                                                   "locale": data["locale"], "options": options}, key, seconds_left)


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


@dataclass
class Limits:
    """Provider slots and per-minute rate, shared through PostgreSQL by every worker."""

    slot_wait_seconds: float = 60.0              # SLOT_WAIT_SECONDS: the timer of a wait for a slot
    _ensured: set = field(default_factory=set)   # (provider, max) whose slot rows exist

    def take(self, conn: psycopg.Connection, provider: str, p: ProviderSettings,
             book: Callable[[psycopg.Connection], spend.Booking | None], *, kind: str, holder: uuid.UUID,
             lane: str = INTERACTIVE) -> tuple[int, spend.Booking | None]:
        """Hold one call slot for `holder` (the attempt's lease token), count one call in this minute's window
        and book its cost, all or nothing, in the caller's transaction. The bulk lane may hold only
        `p.bulk_slots` of the slots, and none while interactive work of its `kind` waits for one.

        Raises SlotsBusy (the task waits until a slot frees and wakes it), Busy (the rate reached: it waits
        for the next minute) or BudgetReached; then nothing is held or booked. A booking that can fail runs
        in a savepoint, so a refusal leaves the caller's transaction (the claim) intact.
        """
        if (provider, p.max_concurrency) not in self._ensured:
            db.execute(conn, "provider_slots_ensure", {"provider": provider, "max": p.max_concurrency})
            self._ensured.add((provider, p.max_concurrency))
        with conn.transaction() if p.cost_per_call > 0 or p.priced_by == "table" else nullcontext():
            usable = p.bulk_slots if lane == BULK else p.max_concurrency
            row = db.one(conn, "provider_slot_and_rate_take", {
                "provider": provider, "max": usable, "top_first": lane != BULK, "holder": holder, "kind": kind,
                "limit": p.rate_per_minute, "hold_seconds": p.call_timeout + 30})
            if row["slot"] is not None:
                return row["slot"], book(conn)
        if not row["slot_free"]:
            self._ensured.discard((provider, p.max_concurrency))   # a rolled-back ensure leaves no slot rows
            which = (f"none of the {usable} call slots the bulk lane may use is free to it" if lane == BULK
                     else f"all {usable} call slots are in use")
            raise SlotsBusy(f"{provider}: {which}", retry_after=self.slot_wait_seconds)
        raise Busy(f"{provider}: {p.rate_per_minute} calls per minute reached",
                   retry_after=float(row["seconds_left"]))


class ProviderExecutor:
    def __init__(self, cfg: Settings, providers: dict[str, Provider], store: MediaStore, book: ReceiptBook,
                 conn: Callable[[], psycopg.Connection]) -> None:
        self.cfg, self.providers, self.store, self.book, self.conn = cfg, providers, store, book, conn
        self.limits = Limits(slot_wait_seconds=cfg.slot_wait_seconds)

    @classmethod
    def from_settings(cls, cfg: Settings, conn: Callable[[], psycopg.Connection] | None = None) -> "ProviderExecutor":
        """`conn`: the connection to book and settle on (a worker's Runtime gives its own, fork-safe one);
        None: one of the executor's own, for a process without a Runtime (the reconciler's lookups)."""
        if conn is None:
            kept: dict = {}

            def conn() -> psycopg.Connection:
                current = kept.get("c")
                if current is None or current.closed or current.broken:
                    current = kept["c"] = servers.connect(cfg)
                return current
        return cls(cfg, build_providers(cfg), storage.media_store(cfg), storage.receipt_book(cfg), conn)

    def prepare(self, conn: psycopg.Connection, task: Task, settlement: Settlement) -> None:
        """Take the slot and rate token and book the cost of the task's call, in the caller's transaction
        (the claim's); what was taken goes into `settlement`. Busy or BudgetReached: nothing was taken."""
        provider = self.providers[task.kind]
        settings: ProviderSettings = getattr(self.cfg, task.kind)
        settlement.prepared = True
        if batched(self.cfg, task):   # a batch line takes no call slot: its booking (the batch price) is all
            with conn.transaction():   # a savepoint: a refused booking leaves the claim intact
                settlement.booking = spend.book(conn, provider.name, task.content_id, settings,
                                                self.cfg.content_budget, self.cfg.budget_recheck_seconds,
                                                cost=spend.estimate(settings, task.kind, task.input, batch=True))
            return
        name = slots_of(provider.name, task.kind)
        replay = settings.honours_idempotency_key and ledger.key_charged(
            conn, idempotency_key(task.fingerprint, task.id))
        cost = spend.estimate(settings, task.kind, task.input)
        slot, booking = self.limits.take(conn, name, settings, lambda c: None if replay else spend.book(
            c, provider.name, task.content_id, settings, self.cfg.content_budget, self.cfg.budget_recheck_seconds,
            cost=cost), kind=task.kind, holder=task.lease_token, lane=task.lane)
        settlement.provider, settlement.slot, settlement.holder = name, slot, task.lease_token
        settlement.bulk_slots = settings.bulk_slots
        settlement.booking, settlement.replay = booking, replay

    def execute(self, task: Task, attempt: Attempt) -> Asset:
        if task.kind == "bundle":  # local work, nothing is paid: any failure may simply be retried
            try:
                with tempfile.TemporaryDirectory(prefix="mediapipe-bundle-") as work:
                    path = Path(work) / "bundle.zip"
                    bundle.build(self.conn(), self.store, task.content_id, task.version, path)
                    sha, size = self.store.put_file(path)
                return Asset(sha, "application/zip", size)
            except (psycopg.Error, OSError, PipelineError) as exc:
                raise Transient(f"could not build the bundle: {exc}") from exc
        provider = self.providers[task.kind]
        settings: ProviderSettings = getattr(self.cfg, task.kind)
        settlement = attempt.settlement
        try:  # nothing has reached the provider yet: any failure here is Transient, Busy or BudgetReached
            request = request_for(task, seconds_left=(min(task.deadline_at, task.attempt_ends_at or task.deadline_at)
                                                      - datetime.now(timezone.utc)).total_seconds())
            if settlement.slot is None:   # not taken with the claim (the input was held by another first)
                conn = self.conn()
                with conn.transaction():
                    self.prepare(conn, task, settlement)
        except psycopg.Error as exc:
            raise Transient(f"could not prepare the call: {exc.__class__.__name__}") from exc
        try:
            attempt.check()
            return self._call(task, provider, settings, request, settlement)
        except Exception as exc:
            if settlement.booking is not None and policy.unpaid(exc):
                self._refund(settlement.booking)
            raise

    def provider_name(self, kind: str) -> str:
        """The name the ledger uses for the provider of a task kind."""
        return self.providers[kind].name if kind in self.providers else kind

    def _refund(self, booking: spend.Booking) -> None:
        try:
            spend.refund(self.conn(), booking)
        except psycopg.Error as exc:   # the booking stays: the budget errs on the side of spending less
            log("spend_refund_failed", provider=booking.provider, error=exc.__class__.__name__)

    def _call(self, task: Task, provider: Provider, settings: ProviderSettings, request: GenerateRequest,
              settlement: Settlement) -> Asset:
        try:
            self.book.write_intent(Intent(task.id, task.attempts, str(task.lease_token), provider.name,
                                          provider.model, task.fingerprint, request.idempotency_key, now()))
        except OSError as exc:   # a full disk, an unreachable bucket: no receipt, so no call
            raise Transient(f"could not write the intent receipt, so the provider was not called: {exc}") from exc
        started = time.monotonic()
        estimate = spend.estimate(settings, task.kind, task.input)
        record = dict(provider=provider.name, model=provider.model, idempotency_key=request.idempotency_key,
                      estimated_cost=estimate, list_cost=estimate)
        try:
            result = provider.generate(request)
        except ProviderError as exc:
            elapsed = int((time.monotonic() - started) * 1000)
            charged = policy.may_have_charged(exc, replay=settlement.replay)
            settlement.ledger = dict(record, outcome=exc.__class__.__name__.lower(), http_status=exc.http_status,
                                     latency_ms=elapsed, cost=estimate if charged else 0.0)
            decided = policy.as_decided(exc, honours_idempotency_key=settings.honours_idempotency_key)
            if decided is exc:
                raise
            raise decided from exc
        elapsed = int((time.monotonic() - started) * 1000)
        asset = keep_result(self.store, self.book, task.id, task.attempts, task.lease_token, result, elapsed)
        # The ledger row is written with the outcome (Settlement); the receipts are the durable record of the call.
        # A key-honouring provider answers a retried key with the first result: one charge, booked once.
        figure = None if settlement.replay else spend.reported(settings, task.kind, task.input, result.metadata)
        settlement.ledger = dict(record, outcome="replayed" if settlement.replay else "succeeded", http_status=200,
                                 latency_ms=elapsed, reported_cost=figure, usage=result.metadata.get("usage"),
                                 cost=0.0 if settlement.replay else (estimate if figure is None else figure))
        return asset
