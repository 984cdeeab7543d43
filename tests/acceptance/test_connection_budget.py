"""The connection budget the README's formula counts on: a worker process holds at most two PostgreSQL
connections (its jobs' own and its heartbeat's), however many jobs it runs."""

import pytest
import redis

from pipeline import dispatch, versions
from testkit.helpers import EDITOR, draft, wait_until
from testkit.system import System
from testkit.webapp import TEST_ENV

pytestmark = pytest.mark.slow


def test_a_worker_process_holds_at_most_two_database_connections(database_url, redis_url, tmp_path):
    # given one worker process of each kind, as the Procfile's pools run them, with the local providers
    (tmp_path / "logs").mkdir()
    system = System({**TEST_ENV, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
                     "MEDIA_DIR": str(tmp_path / "media")}, tmp_path / "logs")
    try:
        for queue in ("image", "tts", "bundle"):
            system.start_worker(queue)
        # when a lesson's images, narrations and bundle run through them
        with system.db() as conn:
            saved = versions.save(conn, draft(3), system.cfg, by=EDITOR)
            dispatch.send_due(conn, redis.Redis.from_url(redis_url))

            def statuses():
                return {r["status"] for r in conn.execute(
                    "SELECT status FROM tasks WHERE content_id = %s", (saved.content_id,)).fetchall()}
            wait_until(lambda: statuses() == {"succeeded"}, timeout=60, message="the lesson done")
            # then the three workers hold at most six connections to this database: two each, not three
            held = conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE datname = current_database() "
                                "AND pid <> pg_backend_pid() AND backend_type = 'client backend'").fetchone()["n"]
        assert 3 <= held <= 6, held
    finally:
        system.stop()
