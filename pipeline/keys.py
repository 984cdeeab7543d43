"""API keys: hashed storage, create / list / revoke, and the principal a token stands for.

A token is 32 random bytes (URL-safe text after the marker `mp_`). Only its
sha256 is stored, not even its first characters: tokens are high-entropy (a
supplied LAB_API_KEY must have at least 32 characters), so a plain hash is
enough and a lookup is one indexed equality. The token itself is returned once,
at creation. This module never logs or stores a token in clear. Revoking a key
ends its UI sessions in the same transaction.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import datetime

import psycopg

from pipeline import db
from pipeline.core.errors import InvalidInput, NotFound
from pipeline.core.people import person
from pipeline.core.principal import PERMISSIONS, ROLES, Principal
from pipeline.core.teams import DEFAULT_TEAM, team_name

TOKEN_PREFIX = "mp_"
DEV_ADMIN_OWNER = "dev-admin"
LAB_OWNER = "lab"


@dataclass(frozen=True)
class KeyInfo:
    id: int
    owner: str
    role: str
    team: str
    created_at: datetime
    revoked_at: datetime | None


def roles_allowed(permission: str) -> list[str]:
    return [role for role in ROLES if permission in PERMISSIONS[role]]


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def _check(owner: str, role: str) -> str:
    owner = person(owner)
    if not 1 <= len(owner) <= 100:
        raise InvalidInput("owner must be 1 to 100 characters, e.g. an e-mail address", field="owner")
    if role not in ROLES:
        raise InvalidInput(f"role {role!r} is unknown; choose one of {', '.join(ROLES)}", field="role")
    return owner


def _insert(conn: psycopg.Connection, owner: str, role: str, token: str, team: str = DEFAULT_TEAM) -> KeyInfo:
    db.execute(conn, "teams_ensure", {"team": team})
    row = db.one(conn, "api_keys_insert", {"owner": owner, "role": role, "key_hash": hash_token(token),
                                           "team": team})
    return KeyInfo(**row)


def create(conn: psycopg.Connection, owner: str, role: str, *, team: str = DEFAULT_TEAM,
           same_person: bool = False) -> tuple[KeyInfo, str]:
    """A new key for `owner` with `role` in `team` (made if new); returns its record and the token (shown once,
    never stored).

    An owner who already holds a live key of another role is refused unless `same_person` says it is meant: with
    an editor's and a reviewer's key one person could save and approve, which the four-eyes rule compares by
    person, so both keys must be seen to be one person's."""
    owner = _check(owner, role)
    team = team_name(team)
    token = new_token()
    with conn.transaction():
        db.execute(conn, "api_keys_lock")
        others = sorted({k.role for k in list_keys(conn) if k.revoked_at is None and person(k.owner) == owner
                         and k.role != role})
        if others and not same_person:
            raise InvalidInput(f"{owner} already holds a live key as {', '.join(others)}; a key of another role for "
                               f"the same person is made only when asked for (bin/keys create --same-person)",
                               field="owner")
        return _insert(conn, owner, role, token, team), token


def list_keys(conn: psycopg.Connection) -> list[KeyInfo]:
    return [KeyInfo(**row) for row in db.all(conn, "api_keys_list")]


def revoke(conn: psycopg.Connection, key_id: int) -> KeyInfo:
    with conn.transaction():
        row = db.one(conn, "api_keys_revoke", {"key_id": key_id})
        db.execute(conn, "web_sessions_delete_of_key", {"key_id": key_id})
    if row is None:
        raise NotFound(f"no live API key with id {key_id}; `bin/keys list` shows the ids")
    return KeyInfo(**row)


def cancel_pending(conn: psycopg.Connection, key_id: int, *, by: Principal) -> list[tuple[int, int, int]]:
    """`by` cancels the work no worker has started of every version the key `key_id` saved (a revoked key's queued
    work would otherwise go on spending): each version's cancel is recorded as any other (events, `by`'s owner),
    names the key, and lists its tasks on the attention page ('revoked'). Calls already running finish and are
    kept. Returns (content, version, tasks cancelled now) per version."""
    from pipeline import versions   # saving imports a good part of the pipeline; keys is imported by the web's auth
    done = []
    for row in db.all(conn, "versions_waiting_of_key", {"key_id": key_id}):
        with conn.transaction():
            cancelled = versions.cancel(conn, row["content_id"], row["version"], by=by)
            db.execute(conn, "versions_mark_cancelled_with_key", {**row, "key_id": key_id})
        done.append((row["content_id"], row["version"], cancelled))
    return done


def authenticate(conn: psycopg.Connection, token: str | None) -> Principal | None:
    """The principal a token belongs to, or None for a missing, unknown or revoked token."""
    if not token or len(token) > 200:
        return None
    row = db.one(conn, "api_keys_by_hash", {"key_hash": hash_token(token)})
    return Principal(row["id"], row["owner"], row["role"], row["team"]) if row else None


def by_id(conn: psycopg.Connection, key_id: int) -> Principal | None:
    row = db.one(conn, "api_keys_get_live", {"key_id": key_id})
    return Principal(row["id"], row["owner"], row["role"], row["team"]) if row else None


def ensure_admin_key(conn: psycopg.Connection, lab_key: str | None) -> str | None:
    """Make sure the dev stack can be used on first start.

    With `lab_key` (LAB_API_KEY) that token becomes an admin key (stored hashed) if it is
    not one already; the caller knows it, so nothing is returned. Without it, an admin key
    is created only when no live admin key exists, and its token is returned to print once.
    """
    with conn.transaction():
        db.execute(conn, "api_keys_lock")
        if lab_key:
            if not db.scalar(conn, "api_keys_hash_known", {"key_hash": hash_token(lab_key)}):
                _insert(conn, LAB_OWNER, "admin", lab_key)
            return None
        if db.scalar(conn, "api_keys_live_admins"):
            return None
        token = new_token()
        _insert(conn, DEV_ADMIN_OWNER, "admin", token)
        return token
