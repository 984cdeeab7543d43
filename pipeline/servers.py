"""The servers a deployment already has: connecting to them, and whether we can use them.

This module owns how every process of ours connects: PostgreSQL with our bounds on every
connection (startup options on a direct connection; through a pooler, which refuses those, the
role's defaults in the database, written by `bin/migrate`), the server version check, and Redis
(password, ACL user, TLS with a private CA). `preflight` is what a process checks at start: a
server it cannot use (too old a PostgreSQL, a refused login, a pooler refusing our startup options,
a missing database) stops it with `ServerUnusable` and a message naming the fix; a server that is
only not up yet is waited for. It knows nothing of tasks. Supported servers and why: README,
docs/deploy.md; the decision: docs/decisions.md ("Servers users already have").
"""

from __future__ import annotations

import time
from typing import Any, Callable
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql
from psycopg.rows import dict_row

from pipeline.core.errors import PipelineError
from pipeline.settings import Settings, masked_url, session_options

OLDEST_MAJOR = 15
TESTED_MAJORS = (15, 16, 17, 18)
# The bounds every connection of ours has, as PostgreSQL settings and the Settings attribute of each.
BOUNDS = {"statement_timeout": "db_statement_timeout_ms", "lock_timeout": "db_lock_timeout_ms",
          "idle_in_transaction_session_timeout": "db_idle_in_transaction_ms"}
# Connection failures that waiting can cure: the server is not (yet) there, or is busy starting or stopping.
_PASSING = ("connection refused", "timeout expired", "could not connect", "starting up", "shutting down",
            "in recovery mode", "too many connections", "no route to host", "name or service not known",
            "temporary failure in name resolution", "server closed the connection", "no more connections allowed")


class ServerUnusable(PipelineError):
    """A server answered, and this system cannot use it as it is; waiting will not help. The message
    names what was found and the fix."""


def check_version(conn: psycopg.Connection) -> None:
    """ServerUnusable unless the server is PostgreSQL 15 or newer."""
    refusal = version_refusal(conn.info.server_version, f"{conn.info.host}:{conn.info.port}")
    if refusal:
        raise ServerUnusable(refusal)


def version_refusal(server_version: int, where: str) -> str | None:
    """Why a server of this version (libpq's number, 150018 for 15.18) cannot be used, or None."""
    if server_version // 10000 >= OLDEST_MAJOR:
        return None
    return (f"PostgreSQL {server_version // 10000}.{server_version % 10000} at {where} is too old: this system "
            f"needs PostgreSQL {OLDEST_MAJOR} or newer (tested on {', '.join(map(str, TESTED_MAJORS))}); upgrade "
            "the server or point DATABASE_URL at a newer one")


def connect_params(cfg: Settings) -> dict[str, Any]:
    """The keyword arguments of psycopg.connect for every connection of ours (a pool takes them too).

    Direct: the bounds travel as the startup parameter `options`. Through a pooler (DB_POOLER=pgbouncer),
    which refuses that parameter and may run each transaction on another server session: no startup
    options and no prepared statements (psycopg prepares a query it has run five times, on one session);
    the bounds are the role's defaults in the database (`write_role_bounds`)."""
    params: dict[str, Any] = {"row_factory": dict_row, "connect_timeout": 5, "application_name": "mediapipe"}
    if cfg.db_pooler == "pgbouncer":
        params["prepare_threshold"] = None
    else:
        params["options"] = session_options(cfg)
    return params


def connect(cfg: Settings, *, autocommit: bool = True, session: bool = False) -> psycopg.Connection:
    """A connection to DATABASE_URL (`session`: to DATABASE_SESSION_URL, for a lock held across
    transactions) with our bounds. ServerUnusable when the server refuses us for good; an
    OperationalError when it cannot be reached (worth another try)."""
    url = cfg.database_session_url if session and cfg.database_session_url else cfg.database_url
    if not url:
        raise ServerUnusable("DATABASE_URL is not set; bin/dev sets it for its embedded server")
    try:
        conn = psycopg.connect(url, autocommit=autocommit, **connect_params(cfg))
    except psycopg.OperationalError as exc:
        raise explained(exc, "DATABASE_SESSION_URL" if url != cfg.database_url else "DATABASE_URL", url) from None
    try:
        check_version(conn)
    except ServerUnusable:
        conn.close()
        raise
    return conn


def explained(exc: psycopg.OperationalError, name: str, url: str) -> Exception:
    """ServerUnusable, with the fix, for a refusal that waiting will not cure; else the error as it was."""
    text = str(exc).lower()
    if "unsupported startup parameter" in text:
        return ServerUnusable(
            f"{name} ({masked_url(url)}) leads to a connection pooler that refuses startup options ({_fatal(exc)}); "
            "set DB_POOLER=pgbouncer, so that the bounds come from the role's defaults (written by bin/migrate), "
            "and DATABASE_SESSION_URL for the pieces that hold a session (README, 'Servers')")
    if "fatal" in text and not any(p in text for p in _PASSING):
        return ServerUnusable(f"PostgreSQL at {masked_url(url)} ({name}) refused us: {_fatal(exc)}")
    return exc


def _fatal(exc: Exception) -> str:
    text = str(exc)
    return text[text.find("FATAL:"):].strip() if "FATAL:" in text else text.strip()


def write_role_bounds(conn: psycopg.Connection, cfg: Settings) -> None:
    """Make our bounds the defaults of the connecting role in this database (what a session opened through
    a pooler gets). A role may set its own defaults; sessions opened from now on have them."""
    for name, attr in BOUNDS.items():
        conn.execute(sql.SQL("ALTER ROLE CURRENT_USER IN DATABASE {} SET {} = {}").format(
            sql.Identifier(conn.info.dbname), sql.Identifier(name), sql.Literal(str(getattr(cfg, attr)))))


def bounds_of(conn: psycopg.Connection) -> dict[str, int]:
    """The bounds this session runs under, in milliseconds."""
    found = {}
    for name in BOUNDS:
        row = conn.execute("SELECT setting FROM pg_settings WHERE name = %(name)s", {"name": name}).fetchone()
        found[name] = int(row["setting"])
    return found


def bounds_warning(found: dict[str, int], cfg: Settings) -> str | None:
    """What to tell the operator when a session's bounds are not the settings' (through a pooler: the role's
    defaults were never written, or were written with other values), or None."""
    wrong = {name: value for name, value in found.items() if value != getattr(cfg, BOUNDS[name])}
    if not wrong:
        return None
    listed = ", ".join(f"{name} is {value} ms, not {getattr(cfg, BOUNDS[name])}" for name, value in wrong.items())
    return (f"this session's bounds are not the settings' ({listed}); run bin/migrate with these settings, which "
            "writes them as the role's defaults in the database (a pooler's server sessions opened before keep "
            "the old values until it opens new ones: PgBouncer's RECONNECT, or its server_lifetime)")


def redis_client(cfg: Settings, *, timeout: float = 5.0, url: str | None = None) -> redis.Redis:
    """A client of REDIS_URL (redis://user:password@…, rediss:// checks the server's certificate
    against REDIS_CA_FILE when set, else the system's CAs)."""
    extra = {"ssl_ca_certs": str(cfg.redis_ca_file)} if cfg.redis_ca_file and _tls(url or cfg.redis_url) else {}
    return redis.Redis.from_url(url or cfg.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout,
                                **extra)


def rq_redis_url(cfg: Settings) -> str:
    """REDIS_URL as RQ's own command line gets it (bin/rqconfig.py): with REDIS_CA_FILE as redis-py's
    `ssl_ca_certs` query argument, so RQ's connection checks the certificate as ours do."""
    url = cfg.redis_url or ""
    if not (cfg.redis_ca_file and _tls(url)):
        return url
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, f"ssl_ca_certs={quote(str(cfg.redis_ca_file))}") if q)
    return urlunsplit(parts._replace(query=query))


def _tls(url: str | None) -> bool:
    return bool(url) and url.startswith("rediss://")


def eviction_policy(client: redis.Redis) -> str:
    """Redis's maxmemory-policy, from INFO (CONFIG is often disabled on hosted Redis)."""
    return str(client.info("memory").get("maxmemory_policy", "unknown"))


def eviction_warning(policy: str, cfg: Settings) -> str | None:
    """What to tell the operator about an eviction policy, or None when Redis never evicts."""
    if policy == "noeviction":
        return None
    return (f"Redis maxmemory-policy is {policy!r}, not 'noeviction': under memory pressure Redis may drop a queued "
            f"message, which the reconciler re-sends only after LOST_DISPATCH_SECONDS ({cfg.lost_dispatch_seconds:g} s); "
            "set maxmemory-policy noeviction")


def preflight(cfg: Settings, *, wait_seconds: float = 30.0, redis_too: bool = True,
              say: Callable[[str], None] = print, sleep: Callable[[float], None] = time.sleep) -> None:
    """Check at start that PostgreSQL and Redis can be used; wait up to `wait_seconds` for servers that are
    not up yet. ServerUnusable (or the last connection error) when they cannot."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            with connect(cfg) as conn:
                warning = bounds_warning(bounds_of(conn), cfg)
            if warning:
                say(f"warning: {warning}")
            if redis_too and cfg.redis_url:
                client = redis_client(cfg)
                try:
                    warning = eviction_warning(eviction_policy(client), cfg)
                finally:
                    client.close()
                if warning:
                    say(f"warning: {warning}")
            return
        except redis.AuthenticationError as exc:
            raise ServerUnusable(f"Redis at {masked_url(cfg.redis_url)} refused our credentials ({exc}); "
                                 "check the user and password in REDIS_URL") from None
        except (psycopg.OperationalError, redis.ConnectionError, redis.TimeoutError) as exc:
            if isinstance(exc, redis.ConnectionError) and "certificate" in str(exc).lower():
                raise ServerUnusable(f"Redis at {masked_url(cfg.redis_url)}: {exc}; set REDIS_CA_FILE to the CA "
                                     "that signed the server's certificate") from None
            if time.monotonic() >= deadline:
                raise
            say(f"waiting for the servers: {exc.__class__.__name__}: {str(exc).strip()[:200]}")
            sleep(1.0)
