"""The editors' UI sessions in PostgreSQL, one `web_sessions` row each, found by the sha256 of the cookie's token
(the token itself is never stored, so a copy of the table signs nobody in).

The web's session store (web/sessions.py) keeps the cookie and the request's copy of the data; this module keeps
the rows. A session lives while its key is live, it is used within SESSION_IDLE_SECONDS and is younger than
SESSION_MAX_SECONDS; revoking a key ends its sessions (pipeline.keys.revoke).
"""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.settings import Settings


def touch(conn: psycopg.Connection, cfg: Settings, token_hash: str) -> dict | None:
    """The live session with this token hash (`key_id`, `owner`, `role`, `data`), its idle clock restarted, in one
    statement; None when there is none (signed out, key revoked, idle too long or past its lifetime)."""
    return db.one(conn, "web_sessions_touch", {"token_hash": token_hash, "idle_seconds": cfg.session_idle_seconds})


def start(conn: psycopg.Connection, cfg: Settings, token_hash: str, key_id: int, data: dict, *,
          replaces: str | None = None) -> None:
    """A new session for a key, ending the one it `replaces` (the hash of the browser's earlier session, if any);
    sessions that can no longer be used are swept out on the way."""
    with conn.transaction():
        if replaces:
            end(conn, replaces)
        db.execute(conn, "web_sessions_sweep", {"idle_seconds": cfg.session_idle_seconds})
        db.execute(conn, "web_sessions_insert", {"token_hash": token_hash, "key_id": key_id, "data": Jsonb(data),
                                                 "max_seconds": cfg.session_max_seconds})


def save(conn: psycopg.Connection, token_hash: str, data: dict) -> None:
    """A session's data after a request changed it (CSRF token, flash messages, preferences)."""
    db.execute(conn, "web_sessions_save", {"token_hash": token_hash, "data": Jsonb(data)})


def end(conn: psycopg.Connection, token_hash: str) -> None:
    """Sign-out: the row goes, so the cookie (or a copy of it) opens nothing any more."""
    db.execute(conn, "web_sessions_delete", {"token_hash": token_hash})
