"""Per-request resources: a PostgreSQL connection borrowed from this process's pool on first use and
given back on teardown, the app's Redis client, and the settings. Views get them here and never open
their own.

The pool keeps connections open between requests: a new connection costs a server process and its
caches, as much as a whole save (docs/performance.md). A connection is checked when it is lent, so
one that a database restart broke is replaced instead of failing a request; a request that finds
every connection busy for `POOL_WAIT_SECONDS` gets 503 `database_unavailable` (web/errors.py).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

import psycopg
import redis
from flask import Flask, current_app, g
from psycopg_pool import ConnectionPool

from pipeline import servers
from pipeline.settings import Settings

POOL_SIZE = 4            # connections one web process keeps at most: one per thread (bin/gunicorn_conf.py)
POOL_WAIT_SECONDS = 5.0  # how long a request waits for a free or a new connection
_POOL_LOCK = threading.Lock()


def settings() -> Settings:
    return current_app.config["SETTINGS"]


def get_conn(wait: float = POOL_WAIT_SECONDS) -> psycopg.Connection:
    """This request's connection. Autocommit: every pipeline call opens its own short transaction.

    `wait`: how long to wait for a connection before giving up (psycopg_pool.PoolTimeout, an
    OperationalError)."""
    if "conn" not in g:
        g.conn = _pool().getconn(timeout=wait)
    return g.conn


@dataclass(frozen=True)
class _ProcessPool:
    """A pool and the process that opened it: a forked child never uses its parent's connections."""

    pid: int
    pool: ConnectionPool


def _own_pool(app: Flask) -> ConnectionPool | None:
    """The app's pool if this process opened it."""
    found = app.extensions.get("pg_pool")
    return found.pool if found is not None and found.pid == os.getpid() else None


def _pool() -> ConnectionPool:
    """This process's pool, made on first use: after gunicorn forks its workers, so none shares one."""
    pool = _own_pool(current_app)
    if pool is not None:
        return pool
    with _POOL_LOCK:
        pool = _own_pool(current_app)
        if pool is None:
            url = settings().database_url
            if not url:
                raise psycopg.OperationalError("DATABASE_URL is not set")
            pool = ConnectionPool(url, kwargs={"autocommit": True, **servers.connect_params(settings())},
                                  min_size=1, max_size=POOL_SIZE, timeout=POOL_WAIT_SECONDS,
                                  configure=servers.check_version, check=ConnectionPool.check_connection,
                                  name="web", open=True)
            current_app.extensions["pg_pool"] = _ProcessPool(os.getpid(), pool)
    return pool


def close_pool(app: Flask) -> None:
    """Close the app's connections (tests that drop their database; a process that stops)."""
    pool = _own_pool(app)
    app.extensions.pop("pg_pool", None)
    if pool is not None:
        pool.close()


def get_redis() -> redis.Redis | None:
    """The app's Redis client (a lazy pool), or None when REDIS_URL is not set."""
    client = current_app.extensions.get("redis")
    if client is None and settings().redis_url:
        client = current_app.extensions["redis"] = servers.redis_client(settings(), timeout=2)
    return client


def give_back_conn(exc: BaseException | None = None) -> None:
    conn = g.pop("conn", None)
    if conn is not None:
        pool = _own_pool(current_app)
        if pool is not None:
            pool.putconn(conn)
        else:
            conn.close()


def init_app(app: Flask) -> None:
    app.teardown_appcontext(give_back_conn)
