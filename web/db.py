"""Per-request resources: one PostgreSQL connection opened on first use and closed on teardown,
the app's Redis client, and the settings. Views get them here and never open their own.
"""

from __future__ import annotations

import psycopg
import redis
from flask import Flask, current_app, g

from pipeline.db import connect
from pipeline.settings import Settings, session_options


def settings() -> Settings:
    return current_app.config["SETTINGS"]


def get_conn() -> psycopg.Connection:
    """This request's connection. Autocommit: every pipeline call opens its own short transaction."""
    if "conn" not in g:
        url = settings().database_url
        if not url:
            raise psycopg.OperationalError("DATABASE_URL is not set")
        g.conn = connect(url, autocommit=True, options=session_options(settings()))
    return g.conn


def get_redis() -> redis.Redis | None:
    """The app's Redis client (a lazy pool), or None when REDIS_URL is not set."""
    client = current_app.extensions.get("redis")
    if client is None and settings().redis_url:
        client = current_app.extensions["redis"] = redis.Redis.from_url(
            settings().redis_url, socket_timeout=2, socket_connect_timeout=2)
    return client


def close_conn(exc: BaseException | None = None) -> None:
    conn = g.pop("conn", None)
    if conn is not None:
        conn.close()


def init_app(app: Flask) -> None:
    app.teardown_appcontext(close_conn)
