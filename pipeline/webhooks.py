"""Webhook endpoints: an admin registers them per team, lists them, rotates their secret, disables, enables and
removes them, and sends messages again; what an endpoint's page shows.

An endpoint's URL is checked when it is registered (pipeline/webhook_http.py `check`: https, or http to this
machine; no address that is not public unless WEBHOOK_ALLOW_NETWORKS holds it) and again before every attempt.
Its secret is derived from SECRET_KEY and a random salt stored with it (pipeline/core/webhooks.py `secret`): it
is shown when made (registration, rotation) and never stored. Events and their messages are written by triggers
in the transaction of the change that causes them (schema/0028_webhooks.sql); sending them is
pipeline/webhook_delivery.py. This module knows nothing of HTTP requests to the web app.
"""

from __future__ import annotations

import secrets as random
from dataclasses import dataclass
from typing import Iterable, Sequence

import psycopg

from pipeline import db, webhook_http
from pipeline.core import webhooks as rules
from pipeline.core.errors import ConfigError, InvalidInput, NotFound
from pipeline.core.principal import Principal
from pipeline.core.teams import team_name
from pipeline.settings import Settings

DEFAULT_OVERLAP_SECONDS = 86_400   # a rotated secret is still signed with for a day, unless said otherwise
MAX_DESCRIPTION = 200


@dataclass(frozen=True)
class Made:
    """An endpoint as registered or rotated, and its secret, shown this once."""

    endpoint: dict
    secret: str


def secret_key(cfg: Settings) -> str:
    if not cfg.secret_key:
        raise ConfigError("SECRET_KEY is not set: webhook secrets are derived from it, so every process that signs "
                          "or shows them (the web, the webhook workers, bin/webhooks) needs the web's SECRET_KEY")
    return cfg.secret_key


def add(conn: psycopg.Connection, cfg: Settings, *, team: str, url: str, events: Iterable[str] | str | None,
        by: Principal, description: str = "") -> Made:
    """`by` registers an endpoint of `team` for these event types (none: all), its URL checked now."""
    team = team_name(team)
    webhook_http.check(url, cfg.webhooks.allow_networks)
    kinds = rules.event_types(events)
    description = (description or "").strip()
    if len(description) > MAX_DESCRIPTION:
        raise InvalidInput(f"the description has {len(description)} characters; at most {MAX_DESCRIPTION}",
                           field="description")
    salt = random.token_urlsafe(24)
    with conn.transaction():
        row = db.one(conn, "webhook_endpoints_add", {"team": team, "url": url, "events": kinds,
                                                     "description": description, "salt": salt, "by": by.owner})
    if row is None:
        raise NotFound(f"team {team!r} does not exist; `bin/keys teams` lists the teams")
    return Made(_shown(row), rules.secret(secret_key(cfg), salt))


def endpoints(conn: psycopg.Connection, team: str | None = None) -> list[dict]:
    """Every endpoint (of one team), with its pending and dead messages counted; never a salt."""
    return [_shown(row) for row in db.all(conn, "webhook_endpoints_list", {"team": team})]


def endpoint(conn: psycopg.Connection, endpoint_id: int, *, limit: int = 50) -> dict:
    """One endpoint, its latest messages and its latest attempts (its page)."""
    row = db.one(conn, "webhook_endpoints_get", {"endpoint_id": endpoint_id})
    if row is None:
        raise NotFound(f"webhook endpoint {endpoint_id} does not exist")
    return {**_shown(row),
            "deliveries": db.all(conn, "webhook_deliveries_of_endpoint", {"endpoint_id": endpoint_id, "limit": limit}),
            "attempts": db.all(conn, "webhook_attempts_of_endpoint", {"endpoint_id": endpoint_id, "limit": limit})}


def rotate(conn: psycopg.Connection, cfg: Settings, endpoint_id: int, *,
           overlap_seconds: float = DEFAULT_OVERLAP_SECONDS) -> Made:
    """A new secret for the endpoint; messages carry a signature by the old one too for `overlap_seconds`, so the
    receiver can switch without losing one (0: the old one ends now)."""
    if not 0 <= overlap_seconds <= 30 * 86_400:
        raise InvalidInput("the overlap is 0 to 30 days (in seconds)", field="overlap")
    salt = random.token_urlsafe(24)
    with conn.transaction():
        row = db.one(conn, "webhook_endpoints_rotate", {"endpoint_id": endpoint_id, "salt": salt,
                                                        "overlap_seconds": overlap_seconds})
    if row is None:
        raise NotFound(f"webhook endpoint {endpoint_id} does not exist")
    return Made(_shown(row), rules.secret(secret_key(cfg), salt))


def disable(conn: psycopg.Connection, endpoint_id: int, *, by: Principal, reason: str) -> int:
    """`by` disables the endpoint: no new message for it; its pending messages are dead (send them again once it is
    enabled). How many died; NotFound for an unknown endpoint (an endpoint already disabled keeps its first reason)."""
    with conn.transaction():
        return disable_in(conn, endpoint_id, actor=by.owner, reason=reason)


def disable_in(conn: psycopg.Connection, endpoint_id: int, *, actor: str, reason: str) -> int:
    """`disable` in the caller's transaction, recorded as `actor`'s: a person's name, or the webhook worker's."""
    if db.one(conn, "webhook_endpoints_disable", {"endpoint_id": endpoint_id, "by": actor, "reason": reason}) is None:
        _exists(conn, endpoint_id)
    return len(db.all(conn, "webhook_deliveries_kill", {"endpoint_id": endpoint_id,
                                                        "reason": f"endpoint disabled: {reason}"}))


def enable(conn: psycopg.Connection, endpoint_id: int) -> dict:
    with conn.transaction():
        row = db.one(conn, "webhook_endpoints_enable", {"endpoint_id": endpoint_id})
        if row is None:
            _exists(conn, endpoint_id)
            row = db.one(conn, "webhook_endpoints_get", {"endpoint_id": endpoint_id})
    return _shown(row)


def remove(conn: psycopg.Connection, endpoint_id: int) -> dict:
    """The endpoint and the history of its messages, for good."""
    with conn.transaction():
        row = db.one(conn, "webhook_endpoints_remove", {"endpoint_id": endpoint_id})
    if row is None:
        raise NotFound(f"webhook endpoint {endpoint_id} does not exist")
    return row


def send_again(conn: psycopg.Connection, endpoint_id: int, delivery_ids: Sequence[int] | None = None) -> list[int]:
    """Send these messages of the endpoint again (None: every dead one), with a new retry window; the same
    webhook-id as before, so a receiver that had one drops it. The ids sent again."""
    with conn.transaction():
        _exists(conn, endpoint_id)
        rows = db.all(conn, "webhook_deliveries_resend",
                      {"endpoint_id": endpoint_id, "ids": None if delivery_ids is None else list(delivery_ids)})
    return [r["id"] for r in rows]


def _exists(conn: psycopg.Connection, endpoint_id: int) -> None:
    if db.one(conn, "webhook_endpoints_get", {"endpoint_id": endpoint_id}) is None:
        raise NotFound(f"webhook endpoint {endpoint_id} does not exist")


def _shown(row: dict) -> dict:
    """An endpoint as people and programs see it: without its salts (`previous_until`: a rotation's overlap)."""
    return {k: v for k, v in row.items() if k not in ("secret_salt", "previous_salt")}
