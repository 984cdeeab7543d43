"""What a paid call needs before it is made and owes after: a provider slot, a rate token, a booking.

What a kind's call needs is resolved once per process (`plans`, held by the runtime): its provider's name and
settings, its slots' name, whether the claim takes its slot itself, its price. `take` holds all three for an
attempt's call in the caller's transaction (the claim's), or raises SlotsBusy, Busy or BudgetReached having taken
nothing; what it took is the attempt's `Call`, a value. `settle` writes what the call owes (its ledger row, which
the executor answered, its booking settled to the reported cost or given back) and frees its slot, waking the tasks
that waited for one, in the transaction that writes the attempt's outcome.
"""

from __future__ import annotations

import json
import uuid
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Callable, Mapping

import psycopg

from pipeline import db, spend
from pipeline.core import kinds, prices
from pipeline.core.errors import Busy, SlotsBusy
from pipeline.core.records import Task
from pipeline.core.lanes import BULK, INTERACTIVE
from pipeline.settings import ProviderSettings, Settings


@dataclass(frozen=True)
class CallPlan:
    """What one kind's attempt needs to know of its call, resolved once per process (`plans`)."""

    kind: kinds.Kind
    provider: str                          # the ledger's name for its provider (a local kind's: its own name)
    shared: bool                           # its input is held while one task makes it, reused once made
    paid: bool = False                     # a provider call (else local work, which takes nothing)
    settings: ProviderSettings | None = None   # paid: its provider's settings
    slots: str | None = None               # paid: the name its call slots go by (`slots_of`)
    bulk_slots: int = 0                    # paid: of those, how many the bulk lane may hold
    in_claim: bool = False                 # paid: the claim itself takes its slot and rate token (`taken_in_claim`)
    books: bool = False                    # paid: its call books a cost, in a savepoint of the claim
    batch: bool = False                    # paid: its bulk lane goes into a Batch API job (IMAGE_BULK_BACKEND=batch)
    estimate: Callable[..., float] | None = None   # paid: what a call for an input is booked at (`prices.estimator`)


@dataclass(frozen=True)
class CallPlans:
    """Every kind's `CallPlan`, and what `attempt_claim` takes for the kinds whose call it takes (JSON: kind ->
    slots' name, slots, the bulk lane's slots, rate, hold; the function makes missing slot rows itself)."""

    of: Mapping[str, CallPlan]
    in_claim: str


def plans(cfg: Settings, providers: Mapping[str, str]) -> CallPlans:
    """What each kind's call needs, from the settings and the name of each kind's provider (`providers`)."""
    of, in_claim = {}, {}
    for kind in kinds.every():
        name = providers[kind.name]
        if not kind.paid:
            of[kind.name] = CallPlan(kind, name, kind.shared)
            continue
        p: ProviderSettings = cfg.providers[kind.name]
        plan = of[kind.name] = CallPlan(
            kind, name, kind.shared, paid=True, settings=p, slots=slots_of(name, kind.name), bulk_slots=p.bulk_slots,
            in_claim=taken_in_claim(cfg, kind.name), books=p.cost_per_call > 0 or p.priced_by == "table",
            batch=cfg.image_bulk_backend == "batch" and kind.batchable, estimate=prices.estimator(p, kind))
        if plan.in_claim:
            in_claim[kind.name] = {"slots": plan.slots, "max": p.max_concurrency, "bulk_max": plan.bulk_slots,
                                   "rate": p.rate_per_minute, "hold_seconds": p.call_timeout + 30}
    return CallPlans(of, json.dumps(in_claim))


@dataclass(frozen=True)
class Call:
    """What one attempt's paid call took: the slot it holds and its booking (a batch line: its booking alone)."""

    slots: str | None = None             # the slots' name (`slots_of`), None when no slot is held
    slot: int | None = None
    holder: uuid.UUID | None = None      # the attempt's lease token
    bulk_slots: int = 0                  # of the provider's slots, how many the bulk lane may hold (for the wake)
    booking: spend.Booking | None = None
    replay: bool = False                 # the provider answers this key with its first result: no new charge
    batch: bool = False                  # no call now: the line goes into a Batch API job

    def owes(self, ledger: dict | None, unpaid: bool) -> bool:
        """Whether settling it writes anything, given its ledger row and whether the attempt proved it unpaid."""
        return ledger is not None or self.slot is not None or (unpaid and self.booking is not None)


def slots_of(provider_name: str, kind: str) -> str:
    """The name a provider's call slots go by for one task kind (`provider_slots.provider`)."""
    return f"{provider_name}:{kind}"


def taken_in_claim(cfg: Settings, kind: str) -> bool:
    """Whether the claim itself takes the call's slot and rate token (`attempt_claim`): when the call needs nothing
    else, no booking (it costs nothing against a limit) and no look at the ledger (its key is not replayed)."""
    p: ProviderSettings = cfg.providers[kind]
    return (p.priced_by != "table" and p.cost_per_call <= 0 and not p.honours_idempotency_key
            and not (cfg.image_bulk_backend == "batch" and kinds.get(kind).batchable))


def take(conn: psycopg.Connection, cfg: Settings, plan: CallPlan, task: Task, claimed: dict | None = None) -> Call:
    """Take what the task's call needs, in the caller's transaction: a slot, a rate token and its booking, the
    booking in a savepoint once the slot is held (a refusal leaves the claim intact); for a batch line only its
    booking (the batch price). `claimed`: the claim's row, which holds the slot and rate token the claim took for a
    kind whose call needs no booking (`plan.in_claim`). SlotsBusy, Busy or BudgetReached: nothing was taken."""
    p = plan.settings
    if claimed is not None and plan.in_claim:
        if claimed["slot"] is not None:
            return Call(plan.slots, claimed["slot"], task.lease_token, plan.bulk_slots)
        _refusal(plan.slots, p, task.lane, claimed["slot_free"], claimed["rate_seconds_left"], cfg.slot_wait_seconds)
    if plan.batch and task.lane == BULK:
        with conn.transaction():   # a savepoint: a refused booking leaves the claim intact
            return Call(booking=spend.book(conn, plan.provider, task.content_id, p, cfg.content_budget,
                                           cfg.budget_recheck_seconds, cost=plan.estimate(task.input, batch=True)),
                        batch=True)
    replay = p.honours_idempotency_key and spend.key_charged(conn, task.idempotency_key)
    cost = plan.estimate(task.input)
    with conn.transaction() if plan.books else nullcontext():   # a refused booking gives the slot back
        slot = hold(conn, plan.slots, p, kind=task.kind, holder=task.lease_token, lane=task.lane,
                    wait_seconds=cfg.slot_wait_seconds)
        booking = None if replay else spend.book(conn, plan.provider, task.content_id, p, cfg.content_budget,
                                                 cfg.budget_recheck_seconds, cost=cost)
    return Call(plan.slots, slot, task.lease_token, plan.bulk_slots, booking, replay)


def hold(conn: psycopg.Connection, provider: str, p: ProviderSettings, *, kind: str, holder: uuid.UUID,
         lane: str = INTERACTIVE, wait_seconds: float = 60.0) -> int:
    """Hold one call slot of `provider` (the slots' name) for `holder` and count one call in this minute's window,
    both or neither, in the caller's transaction (`take` books the call's cost beside it): the slot held. The bulk
    lane may hold only `p.bulk_slots` of the slots, and none while interactive work of its `kind` waits for one.
    SlotsBusy or Busy (`_refusal`): nothing was held."""
    db.execute(conn, "provider_slots_ensure", {"provider": provider, "max": p.max_concurrency})   # looks first
    row = db.one(conn, "provider_slot_and_rate_take", {
        "provider": provider, "max": p.bulk_slots if lane == BULK else p.max_concurrency, "top_first": lane != BULK,
        "holder": holder, "kind": kind, "limit": p.rate_per_minute, "hold_seconds": p.call_timeout + 30})
    if row["slot"] is None:
        _refusal(provider, p, lane, row["slot_free"], row["seconds_left"], wait_seconds)
    return row["slot"]


def _refusal(provider: str, p: ProviderSettings, lane: str, slot_free: bool, seconds_left,
             wait_seconds: float) -> None:
    """SlotsBusy (no usable slot was free: the task waits until a slot frees and wakes it, at most `wait_seconds`)
    or Busy (the minute's rate was reached: it waits for the next minute): nothing was taken."""
    if not slot_free:
        usable = p.bulk_slots if lane == BULK else p.max_concurrency
        which = (f"none of the {usable} call slots the bulk lane may use is free to it" if lane == BULK
                 else f"all {usable} call slots are in use")
        raise SlotsBusy(f"{provider}: {which}", retry_after=wait_seconds)
    raise Busy(f"{provider}: {p.rate_per_minute} calls per minute reached", retry_after=float(seconds_left))


def settle(conn: psycopg.Connection, task: Task, call: Call, ledger: dict | None = None, *,
           unpaid: bool = False) -> psycopg.Cursor | None:
    """Write what the call owes, in the caller's transaction: its ledger row (the executor's answer, None when no
    call was made), its booking settled to the reported cost or given back when the attempt's error proves it
    `unpaid` (`settle_booking`), and its slot freed. The wake of the slot waiters the release lets run travels with
    the COMMIT: its cursor (their outbox rows) is read once the transaction ended. A success writes its ledger row
    and frees its slot in `attempt_succeed` instead, and settles only its booking (`settle_booking`)."""
    if ledger is not None:
        spend.record_call(conn, task, **ledger)
    if call.booking is not None:
        settle_booking(conn, call.booking, ledger, unpaid=unpaid)
    if call.slot is None:
        return None
    db.execute(conn, "provider_slots_release", {"provider": call.slots, "slot": call.slot, "holder": call.holder})
    return db.execute(conn, "provider_slots_wake", {"kind": task.kind, "provider": call.slots,
                                                     "bulk_slots": call.bulk_slots})


def settle_booking(conn: psycopg.Connection, booking: spend.Booking, ledger: dict | None, *,
                   unpaid: bool = False) -> None:
    """A call's booking settled to the cost its ledger row reports, or given back when the call provably cost
    nothing."""
    if unpaid:
        spend.refund_in(conn, booking)
    elif ledger is not None and ledger.get("reported_cost") is not None:
        spend.settle(conn, booking, ledger["reported_cost"])
