"""What a paid call needs before it is made and owes after: a provider slot, a rate token, a booking.

`take` holds all three for an attempt's call in the caller's transaction (the claim's), or raises
SlotsBusy, Busy or BudgetReached having taken nothing; what it took is the attempt's `Call`. `settle`
writes what the call owes (its ledger row, its booking settled to the reported cost) and frees its
slot, waking the tasks that waited for one, in the transaction that writes the attempt's outcome.
"""

from __future__ import annotations

import json
import uuid
from contextlib import nullcontext
from dataclasses import dataclass

import psycopg

from pipeline import db, spend
from pipeline.core import prices
from pipeline.core.errors import Busy, SlotsBusy
from pipeline.core.records import Task
from pipeline.core import kinds
from pipeline.core.lanes import BULK, INTERACTIVE
from pipeline.settings import ProviderSettings, Settings


@dataclass
class Call:
    """One attempt's paid call: the slot it holds, its booking, and its ledger row once it was made."""

    provider: str | None = None          # the slot's name (`slots_of`), None when no slot is held
    slot: int | None = None
    holder: uuid.UUID | None = None      # the attempt's lease token
    bulk_slots: int = 0                  # of the provider's slots, how many the bulk lane may hold (for the wake)
    booking: spend.Booking | None = None
    replay: bool = False                 # the provider answers this key with its first result: no new charge
    ledger: dict | None = None           # the call's ledger row, once the call was made
    unpaid: bool = False                 # the attempt ended in an error that proves the call cost nothing

    def owes(self) -> bool:
        return self.ledger is not None or self.slot is not None or (self.unpaid and self.booking is not None)


def slots_of(provider_name: str, kind: str) -> str:
    """The name a provider's call slots go by for one task kind (`provider_slots.provider`)."""
    return f"{provider_name}:{kind}"


def batched(cfg: Settings, task: Task) -> bool:
    """Whether the task's call goes into a Batch API job (IMAGE_BULK_BACKEND=batch, a bulk-lane image)."""
    return cfg.image_bulk_backend == "batch" and kinds.get(task.kind).batchable and task.lane == BULK


def taken_in_claim(cfg: Settings, kind: str) -> bool:
    """Whether the claim itself takes the call's slot and rate token (`attempt_claim`): when the call needs nothing
    else, no booking (it costs nothing against a limit) and no look at the ledger (its key is not replayed)."""
    p: ProviderSettings = cfg.providers[kind]
    return (p.priced_by != "table" and p.cost_per_call <= 0 and not p.honours_idempotency_key
            and not (cfg.image_bulk_backend == "batch" and kinds.get(kind).batchable))


@dataclass
class SlotTable:
    """Provider call slots and per-minute rate, shared through PostgreSQL by every worker (one per process)."""

    _in_claim: dict | None = None                 # kind -> what the claim takes for its call, once asked
    _in_claim_json: str = "{}"

    def in_claim(self, cfg: Settings, provider_name) -> str:
        """What the claim takes for each kind whose call it takes (`taken_in_claim`), as `attempt_claim` reads it
        (JSON: kind -> slots' name, slots, the bulk lane's slots, rate, hold); the function makes missing slot
        rows itself."""
        if self._in_claim is None:
            calls = {}
            for kind in kinds.paid_names():
                if not taken_in_claim(cfg, kind):
                    continue
                p: ProviderSettings = cfg.providers[kind]
                calls[kind] = {"slots": slots_of(provider_name(kind), kind), "max": p.max_concurrency,
                               "bulk_max": p.bulk_slots, "rate": p.rate_per_minute, "hold_seconds": p.call_timeout + 30}
            self._in_claim, self._in_claim_json = calls, json.dumps(calls)
        return self._in_claim_json

    def taken(self, task: Task, cfg: Settings, row: dict) -> Call:
        """The call the claim took (`attempt_claim`'s row); SlotsBusy or Busy when it took nothing."""
        took = self._in_claim[task.kind]
        if row["slot"] is not None:
            return Call(took["slots"], row["slot"], task.lease_token, took["bulk_max"])
        return _refusal(took["slots"], cfg.providers[task.kind], task.lane, row["slot_free"],
                             row["rate_seconds_left"], cfg.slot_wait_seconds)

    def hold(self, conn: psycopg.Connection, provider: str, p: ProviderSettings, book, *, kind: str,
             holder: uuid.UUID, lane: str = INTERACTIVE,
             wait_seconds: float = 60.0) -> tuple[int, spend.Booking | None]:
        """Hold one call slot for `holder`, count one call in this minute's window and `book` its cost, all or
        nothing, in the caller's transaction. The bulk lane may hold only `p.bulk_slots` of the slots, and none
        while interactive work of its `kind` waits for one.

        Raises SlotsBusy (the task waits until a slot frees and wakes it, at most `wait_seconds`), Busy (the rate
        reached: it waits for the next minute) or BudgetReached; then nothing is held or booked. A booking that can fail runs
        in a savepoint, so a refusal leaves the caller's transaction (the claim) intact.
        """
        db.execute(conn, "provider_slots_ensure", {"provider": provider, "max": p.max_concurrency})   # looks first
        with conn.transaction() if p.cost_per_call > 0 or p.priced_by == "table" else nullcontext():
            usable = p.bulk_slots if lane == BULK else p.max_concurrency
            row = db.one(conn, "provider_slot_and_rate_take", {
                "provider": provider, "max": usable, "top_first": lane != BULK, "holder": holder, "kind": kind,
                "limit": p.rate_per_minute, "hold_seconds": p.call_timeout + 30})
            if row["slot"] is not None:
                return row["slot"], book(conn)
        _refusal(provider, p, lane, row["slot_free"], row["seconds_left"], wait_seconds)


def _refusal(provider: str, p: ProviderSettings, lane: str, slot_free: bool, seconds_left,
             wait_seconds: float) -> None:
    """SlotsBusy (no usable slot was free) or Busy (the minute's rate was reached): nothing was taken."""
    if not slot_free:
        usable = p.bulk_slots if lane == BULK else p.max_concurrency
        which = (f"none of the {usable} call slots the bulk lane may use is free to it" if lane == BULK
                 else f"all {usable} call slots are in use")
        raise SlotsBusy(f"{provider}: {which}", retry_after=wait_seconds)
    raise Busy(f"{provider}: {p.rate_per_minute} calls per minute reached", retry_after=float(seconds_left))


def take(conn: psycopg.Connection, cfg: Settings, table: SlotTable, task: Task, provider: str) -> Call:
    """Take what the task's call needs, in the caller's transaction: a slot, a rate token and its booking; for a
    batch line only its booking (the batch price). SlotsBusy, Busy or BudgetReached: nothing was taken."""
    p: ProviderSettings = cfg.providers[task.kind]
    if batched(cfg, task):
        with conn.transaction():   # a savepoint: a refused booking leaves the claim intact
            return Call(booking=spend.book(conn, provider, task.content_id, p, cfg.content_budget,
                                           cfg.budget_recheck_seconds,
                                           cost=prices.estimate(p, task.kind, task.input, batch=True)))
    replay = p.honours_idempotency_key and spend.key_charged(conn, task.idempotency_key)
    cost = prices.estimate(p, task.kind, task.input)
    name = slots_of(provider, task.kind)
    slot, booking = table.hold(conn, name, p, lambda c: None if replay else spend.book(
        c, provider, task.content_id, p, cfg.content_budget, cfg.budget_recheck_seconds, cost=cost),
        kind=task.kind, holder=task.lease_token, lane=task.lane, wait_seconds=cfg.slot_wait_seconds)
    return Call(name, slot, task.lease_token, p.bulk_slots, booking, replay)


def settle(conn: psycopg.Connection, task: Task, call: Call) -> psycopg.Cursor | None:
    """Write the call's ledger row, settle its booking (`settle_booking`) and free its slot, in the caller's
    transaction. The wake of the slot waiters the release lets run travels with the COMMIT: its cursor (their
    outbox rows) is read once the transaction ended. A success writes its ledger row and frees its slot in
    `attempt_succeed` instead, and settles only its booking here."""
    if call.ledger is not None:
        spend.record_call(conn, task, **call.ledger)
    settle_booking(conn, call)
    if call.slot is None:
        return None
    db.execute(conn, "provider_slots_release", {"provider": call.provider, "slot": call.slot, "holder": call.holder})
    return db.execute(conn, "provider_slots_wake", {"kind": task.kind, "provider": call.provider,
                                                     "bulk_slots": call.bulk_slots})


def settle_booking(conn: psycopg.Connection, call: Call) -> None:
    """The call's booking settled to the reported cost, or given back when the call provably cost nothing."""
    if call.booking is not None and call.unpaid:
        spend.refund_in(conn, call.booking)
    elif call.booking is not None and call.ledger is not None and call.ledger.get("reported_cost") is not None:
        spend.settle(conn, call.booking, call.ledger["reported_cost"])
