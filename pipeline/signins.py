"""Throttling failed UI sign-ins by client address, kept in PostgreSQL so every web process counts alike.

An address that failed LIMIT times within WINDOW_SECONDS waits until its window ends; a sign-in from it is
not even checked meanwhile. API keys are 32 random bytes, so the throttle is about noise and logs, not about
guessing; the web logs every failure with the address (web/auth.py).
"""

from __future__ import annotations

import psycopg

from pipeline import db

LIMIT = 10
WINDOW_SECONDS = 600


def throttled(conn: psycopg.Connection, address: str) -> int:
    """Seconds this address must wait before its next sign-in; 0 when it may try now."""
    return db.scalar(conn, "signin_failures_wait", {"address": address, "limit": LIMIT,
                                                    "window": WINDOW_SECONDS}) or 0


def failed(conn: psycopg.Connection, address: str) -> None:
    db.execute(conn, "signin_failures_add", {"address": address, "window": WINDOW_SECONDS})


def sweep(conn: psycopg.Connection) -> None:
    db.execute(conn, "signin_failures_sweep", {"window": WINDOW_SECONDS})
