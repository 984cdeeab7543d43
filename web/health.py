"""Liveness and readiness: /healthz says the process answers, /readyz checks its dependencies.

/readyz uses the request's PostgreSQL connection and the app's Redis pool (web.db), not new
connections of its own on every hit; the migration files are read once per process. What a failing
check says (a migration's name, a server's error) goes only to this machine or to a caller with
METRICS_TOKEN; anyone else learns which check fails, not why.
"""

from __future__ import annotations

import psycopg
import redis
from flask import Blueprint, Flask, current_app, jsonify

from pipeline import migrations
from web.db import get_conn, get_redis
from web.security import bearer_matches, direct_loopback

bp = Blueprint("health", __name__)
READY_WAIT_SECONDS = 2.0   # a readiness probe answers within its own timeout, like the Redis check's


def init_app(app: Flask) -> None:
    pass


@bp.get("/healthz")
def healthz():
    return jsonify(status="ok")


def _migration_files() -> list[migrations.Migration]:
    files = current_app.extensions.get("migration_files")
    if files is None:
        files = current_app.extensions["migration_files"] = migrations.discover()
    return files


def _check_postgres(url: str | None) -> str | None:
    if not url:
        return "DATABASE_URL is not set"
    try:
        todo = migrations.pending(get_conn(wait=READY_WAIT_SECONDS), _migration_files())
    except psycopg.Error as exc:
        return f"PostgreSQL unreachable: {exc.__class__.__name__}"
    except migrations.MigrationError as exc:
        return f"schema mismatch: {exc}"
    if todo:
        return f"migrations missing: {', '.join(f'{m.version:04d}_{m.name}' for m in todo)}; run bin/migrate"
    return None


def _check_redis(url: str | None) -> str | None:
    if not url:
        return "REDIS_URL is not set"
    try:
        get_redis().ping()
    except redis.RedisError as exc:
        return f"Redis unreachable: {exc.__class__.__name__}"
    return None


@bp.get("/readyz")
def readyz():
    cfg = current_app.config["SETTINGS"]
    checks = {"postgres": _check_postgres(cfg.database_url), "redis": _check_redis(cfg.redis_url)}
    failed = {name: problem for name, problem in checks.items() if problem}
    shown = {name: (problem or "ok") for name, problem in checks.items()}
    if not _may_see_detail():   # a migration error or a server's class name is for the operator, not for everyone
        shown = {name: ("ok" if not problem else "failing") for name, problem in checks.items()}
    body = {"status": "ready" if not failed else "not ready", "checks": shown}
    return jsonify(body), (503 if failed else 200)


def _may_see_detail() -> bool:
    """The checks' words go to this machine, or to whoever sends METRICS_TOKEN as a bearer token."""
    return bearer_matches(current_app.config["SETTINGS"].metrics_token) or direct_loopback()
