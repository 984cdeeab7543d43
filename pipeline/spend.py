"""Budgets: a call's cost is booked before the call, atomically across every worker.

This module owns the booking of a paid call against its provider's daily limit
(`*_DAILY_BUDGET`, per UTC day) and its content's limit (`CONTENT_BUDGET`), and the
refund of a booking whose call provably cost nothing. A booking is one guarded UPDATE
per limit (`spend.sql`): racing workers queue on the row and the limit is re-checked
on the row they get, so no race passes a limit by even one call. A call that would
pass a limit is not made: `BudgetReached` parks its task without spending an attempt.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date

import psycopg

from pipeline import db
from pipeline.errors import BudgetReached
from pipeline.settings import ProviderSettings


@dataclass(frozen=True)
class Booking:
    provider: str
    day: date
    cost: float
    content_id: int


def book(conn: psycopg.Connection, provider: str, content_id: int, p: ProviderSettings,
         content_limit: float | None, recheck_seconds: float) -> Booking | None:
    """Book one call's cost inside the caller's transaction; BudgetReached (the caller rolls back) when over."""
    cost = p.cost_per_call
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
        db.execute(conn, "spend_days_refund", {"provider": booking.provider, "day": booking.day,
                                               "cost": booking.cost})
        db.execute(conn, "content_spend_refund", {"content_id": booking.content_id, "cost": booking.cost})
