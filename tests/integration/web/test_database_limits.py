"""Every wait on the database is bounded: statements, lock waits and idle transactions end with a clear error."""

from __future__ import annotations

import time

import psycopg
import pytest

from pipeline import settings
from pipeline.db import connect
from testkit.helpers import lesson, wait_until
from testkit.webapp import Api, make_app

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def limited(database_url: str, **env: str):
    cfg = settings.load({"DATABASE_URL": database_url, **env})
    return connect(database_url, autocommit=True, options=settings.session_options(cfg))


def test_a_statement_past_its_timeout_is_cancelled(database_url):
    with limited(database_url, DB_STATEMENT_TIMEOUT_MS="300") as conn:
        started = time.monotonic()
        with pytest.raises(psycopg.errors.QueryCanceled, match="statement timeout"):
            conn.execute("SELECT pg_sleep(10)")
        assert time.monotonic() - started < 3


def test_a_transaction_left_open_is_ended_by_the_server(database_url, conn):
    session = limited(database_url, DB_IDLE_IN_TRANSACTION_MS="300")
    session.autocommit = False
    session.execute("SELECT 1")   # opens a transaction, then the caller forgets it
    pid = session.info.backend_pid
    wait_until(lambda: conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone() is None,
               timeout=10, message="the server ending the idle transaction's session")
    with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
        session.execute("SELECT 1")
    session.close()


def test_a_save_behind_a_held_lock_is_503_and_writes_nothing(database_url, redis_url, tmp_path, tokens, conn):
    # given: a content whose row another transaction holds
    app = make_app(database_url, redis_url, tmp_path / "media", DB_LOCK_TIMEOUT_MS="300")
    api = Api(app.test_client(), tokens)
    created = api.create(1)
    with connect(database_url) as holder:
        holder.execute("SELECT * FROM contents WHERE id = %s FOR UPDATE", (created["content_id"],))
        # when: an editor saves a new version
        started = time.monotonic()
        response = api.put(f"/api/contents/{created['content_id']}", role="editor",
                           json={**lesson(1, prefix="new"), "base_version": 1})
        waited = time.monotonic() - started
        holder.rollback()
    # then: a clear 503 soon after the lock timeout, and no version 2
    assert response.status_code == 503, response.json
    assert response.json["error"]["code"] == "database_busy" and response.headers["Retry-After"] == "2"
    assert waited < 5
    assert conn.execute("SELECT count(*) AS n FROM versions WHERE content_id = %s",
                        (created["content_id"],)).fetchone()["n"] == 1


def test_a_pooled_connection_the_server_ended_is_replaced_before_a_request_gets_it(api, conn):
    # given: the web process holds a pooled connection from an earlier request
    assert api.get("/api/contents").status_code == 200
    # when: the server ends it, as a restart would
    ended = conn.execute("SELECT pg_terminate_backend(pid) AS ended FROM pg_stat_activity "
                         "WHERE datname = current_database() AND pid <> pg_backend_pid()").fetchall()
    assert ended and all(row["ended"] for row in ended)
    # then: the next request is served on a working connection, not answered 503
    assert api.get("/api/contents").status_code == 200
