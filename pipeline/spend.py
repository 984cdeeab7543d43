"""Budgets: a call's cost is booked before the call, atomically across every worker.

This module owns the booking of a paid call against its provider's daily limit
(`*_DAILY_BUDGET`, per UTC day) and its content's limit (`CONTENT_BUDGET`), and the
refund of a booking whose call provably cost nothing. A booking is one guarded UPDATE
per limit (`spend.sql`): racing workers queue on the row and the limit is re-checked
on the row they get, so no race passes a limit by even one call. A call that would
pass a limit is not made: `BudgetReached` parks its task without spending an attempt.
The call ledger (provider_calls, ledger.sql) is here too: one row per provider call, reuse or replay, with
its cost (`record_call`, written with the attempt's outcome), and whether a key was already charged
(`key_charged`). It also reads the spend back for people (`report`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timezone

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.core.errors import BudgetReached
from pipeline.core.ledger import totals as ledger_totals
from pipeline.core.records import Task
from pipeline.settings import ProviderSettings, Settings


@dataclass(frozen=True)
class Booking:
    provider: str
    day: date
    cost: float
    content_id: int


def settle(conn: psycopg.Connection, booking: Booking, figure: float) -> None:
    """In the caller's transaction: the booking's estimate becomes `figure`, what the provider reported."""
    delta = round(figure - booking.cost, 6)
    if delta:
        db.execute(conn, "spend_days_settle", {"provider": booking.provider, "day": booking.day, "delta": delta})
        db.execute(conn, "content_spend_settle", {"content_id": booking.content_id, "delta": delta})


def book(conn: psycopg.Connection, provider: str, content_id: int, p: ProviderSettings,
         content_limit: float | None, recheck_seconds: float, cost: float | None = None) -> Booking | None:
    """Book one call's cost (default: the configured model's) inside the caller's transaction;
    BudgetReached (the caller rolls back) when over."""
    cost = p.cost_per_call if cost is None else cost
    if cost <= 0:
        return None   # nothing to count against a limit
    db.execute(conn, "spend_days_ensure", {"provider": provider})
    day = db.one(conn, "spend_days_book", {"provider": provider, "cost": cost, "limit": p.daily_budget})
    if day is None:
        spent = db.scalar(conn, "spend_days_today", {"provider": provider})
        raise BudgetReached(f"paused: daily budget reached ({provider} spent {spent:g} of {p.daily_budget:g} today)",
                            retry_after=recheck_seconds)
    db.execute(conn, "content_spend_ensure", {"content_id": content_id})
    if db.one(conn, "content_spend_book", {"content_id": content_id, "cost": cost, "limit": content_limit}) is None:
        raise BudgetReached(f"paused: content budget reached (limit {content_limit:g})", retry_after=recheck_seconds)
    return Booking(provider, day["day"], cost, content_id)


def refund(conn: psycopg.Connection, booking: Booking) -> None:
    """Give a booking back: its call was refused or never sent, so nothing was charged."""
    with conn.transaction():
        refund_in(conn, booking)


def refund_in(conn: psycopg.Connection, booking: Booking) -> None:
    """`refund` in the caller's transaction."""
    db.execute(conn, "spend_days_refund", {"provider": booking.provider, "day": booking.day, "cost": booking.cost})
    db.execute(conn, "content_spend_refund", {"content_id": booking.content_id, "cost": booking.cost})


def record_call(conn: psycopg.Connection, task: Task, *, provider: str, model: str, idempotency_key: str,
                outcome: str, http_status: int | None, latency_ms: int | None, cost: float,
                estimated_cost: float | None = None, reported_cost: float | None = None,
                list_cost: float | None = None, usage: dict | None = None, batch_id: int | None = None) -> None:
    """One row of the call ledger for the task's current attempt: `cost` counts as spent (the reported figure
    where the provider gave one, else the estimate); a batch line names its batch and its synchronous price."""
    db.execute(conn, "provider_calls_insert", {
        "task_id": task.id, "attempt": task.attempts, "provider": provider, "model": model,
        "idempotency_key": idempotency_key, "outcome": outcome, "http_status": http_status,
        "latency_ms": latency_ms, "cost": cost, "accepted_by": None, "estimated_cost": estimated_cost,
        "reported_cost": reported_cost, "list_cost": list_cost, "usage": Jsonb(usage) if usage else None,
        "batch_id": batch_id})


def record_reuse(conn: psycopg.Connection, task: Task, provider: str) -> None:
    """The attempt paid nothing: an identical input's asset, made by `provider`, was reused."""
    record_call(conn, task, provider=provider, model=task.input.get("model", task.kind), idempotency_key="-",
                outcome="reused", http_status=None, latency_ms=0, cost=0)


def key_charged(conn: psycopg.Connection, idempotency_key: str) -> bool:
    """Whether an earlier call with this idempotency key may have been charged (an Ambiguous answer with a cost)."""
    return bool(db.scalar(conn, "provider_calls_key_charged", {"idempotency_key": idempotency_key}))


def report(conn: psycopg.Connection, cfg: Settings, content_id: int | None = None, *, team: str | None) -> dict:
    """What was spent: today per provider against its budget (the providers' budgets are the deployment's, shared
    by every team), and the ledger (today's of `team`'s contents, None: every team's; or one content's whole
    history) as calls, reuses and replays, with every duplicate charge and who consented to it."""
    today = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    budgets = {p.name: p.daily for p in _providers(cfg)}
    booked = {r["provider"]: r for r in db.all(conn, "spend_days_of_today")}
    today_ledger = db.all(conn, "provider_calls_summary_since", {"since": today, "team": team})
    # `calls_today` counts the bookings against a budget (a free call books nothing); `paid_calls_today`, the
    # ledger's paid calls, is the figure the page's call totals add up to
    providers = [{"provider": name, "spent_today": booked.get(name, {}).get("spent", 0.0),
                  "calls_today": booked.get(name, {}).get("calls", 0),
                  "paid_calls_today": ledger_totals([r for r in today_ledger if r["provider"] == name])["paid_calls"],
                  "daily_budget": limit,
                  "budget_reached": limit is not None and booked.get(name, {}).get("spent", 0.0) >= limit}
                 for name, limit in budgets.items()]
    if content_id is None:
        ledger = today_ledger
    else:
        ledger = db.all(conn, "provider_calls_summary_of_content", {"content_id": content_id})
    since = today if content_id is None else datetime.min.replace(tzinfo=timezone.utc)
    duplicates = db.all(conn, "provider_calls_duplicates", {"since": since, "content_id": content_id, "team": team})
    paused = {r["kind"]: r["n"] for r in db.all(conn, "tasks_paused_by_budget", {"team": team})}
    return {"scope": "today" if content_id is None else f"content {content_id}", "content_id": content_id,
            "team": team,
            "providers": providers, "content_budget": cfg.content_budget, "paused_by_budget": paused,
            "ledger": ledger, "totals": ledger_totals(ledger), "duplicates": duplicates}


@dataclass(frozen=True)
class _Provider:
    name: str
    daily: float | None


def _providers(cfg: Settings) -> list[_Provider]:
    # the ledger's names for the configured providers (registry names: local-image, openai-tts, ...)
    return [_Provider(f"{p.backend}-{kind}", p.daily_budget) for kind, p in cfg.providers.items()]
