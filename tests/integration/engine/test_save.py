import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from pipeline import db, versions
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, NotFound
from pipeline.db import connect
from testkit.helpers import EDITOR, SECOND_EDITOR, assert_pending_counts, draft, keyed, make_settings, wait_until

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def counts(conn):
    return {t: conn.execute(f"SELECT count(*) AS n FROM {t}").fetchone()["n"]
            for t in ("contents", "versions", "tasks", "task_deps", "outbox", "events")}


def test_a_save_writes_version_tasks_and_outbox_rows_together(conn, cfg):
    saved = versions.save(conn, draft(3), cfg, by=EDITOR)
    # then: 3 image + 3 tts + 1 bundle; the bundle waits on the six media tasks; media tasks are queued
    tasks = conn.execute("SELECT kind, block_key, status FROM tasks ORDER BY id").fetchall()
    assert [t["kind"] for t in tasks] == ["image", "tts"] * 3 + ["bundle"]
    assert {t["status"] for t in tasks} == {"ready"}
    assert counts(conn)["task_deps"] == 6
    queued = conn.execute("SELECT t.kind FROM outbox o JOIN tasks t ON t.id = o.task_id").fetchall()
    assert sorted(r["kind"] for r in queued) == ["image"] * 3 + ["tts"] * 3
    assert len(saved.outbox_ids) == 6 and saved.version == 1


def test_a_failure_inside_the_save_transaction_leaves_nothing(conn, cfg):
    # given a database that fails the fourth outbox insert of a save
    conn.execute("""CREATE FUNCTION boom() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN IF (SELECT count(*) FROM outbox) >= 3 THEN RAISE EXCEPTION 'disk on fire'; END IF; RETURN NEW; END $$""")
    conn.execute("CREATE TRIGGER boom BEFORE INSERT ON outbox FOR EACH ROW EXECUTE FUNCTION boom()")
    # when a save runs into it
    with pytest.raises(psycopg.errors.RaiseException):
        versions.save(conn, draft(3), cfg, by=EDITOR)
    # then no content, version, task, dependency, outbox row or event exists
    assert set(counts(conn).values()) == {0}


def test_a_save_on_a_stale_base_version_is_refused_and_changes_nothing(conn, cfg):
    first = versions.save(conn, draft(2), cfg, by=EDITOR)
    versions.save(conn, draft(2, prefix="v2"), cfg, by=EDITOR, content_id=first.content_id, base_version=1)
    before = counts(conn)
    with pytest.raises(Conflict) as refused:
        versions.save(conn, draft(2, prefix="v3"), cfg, by=SECOND_EDITOR, content_id=first.content_id, base_version=1)
    assert refused.value.code == "stale_base_version" and refused.value.details == {"current_version": 2}
    assert counts(conn) == before


def test_saving_an_unknown_content_is_not_found(conn, cfg):
    with pytest.raises(NotFound):
        versions.save(conn, draft(1), cfg, by=EDITOR, content_id=999, base_version=1)


def test_the_same_idempotency_key_returns_the_first_save_and_another_body_is_refused(conn, cfg):
    first = versions.save(conn, draft(2), cfg, by=EDITOR, save_key="k-1")
    again = versions.save(conn, draft(2), cfg, by=EDITOR, save_key="k-1")
    assert (again.content_id, again.version, again.created) == (first.content_id, 1, False)
    before = counts(conn)
    with pytest.raises(Conflict) as refused:
        versions.save(conn, draft(3), cfg, by=EDITOR, save_key="k-1")
    assert refused.value.code == "idempotency_key_reused" and counts(conn) == before


def test_concurrent_saves_with_one_key_create_one_task_set(cfg):
    def save(_):
        with connect(cfg.database_url, autocommit=True) as c:
            return versions.save(c, draft(2), cfg, by=EDITOR, save_key="same")
    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(save, range(6)))
    assert {(r.content_id, r.version) for r in results} == {(results[0].content_id, 1)}
    with connect(cfg.database_url) as c:
        assert counts(c)["tasks"] == 5


def test_a_new_version_supersedes_unfinished_tasks_and_drops_their_messages(conn, cfg):
    first = versions.save(conn, draft(2), cfg, by=EDITOR)
    second = versions.save(conn, draft(2, prefix="new"), cfg, by=EDITOR, content_id=first.content_id,
                           base_version=1)
    rows = conn.execute("SELECT version, status, count(*) AS n FROM tasks GROUP BY 1, 2 ORDER BY 1").fetchall()
    assert [(r["version"], r["status"], r["n"]) for r in rows] == [(1, "superseded", 5), (2, "ready", 5)]
    assert second.superseded == 5
    pending = conn.execute("SELECT DISTINCT t.version FROM outbox o JOIN tasks t ON t.id = o.task_id").fetchall()
    assert [r["version"] for r in pending] == [2]
    events = conn.execute("SELECT count(*) AS n FROM events WHERE to_status = 'superseded'").fetchone()
    assert events["n"] == 5


def test_admission_refuses_a_save_over_capacity_and_writes_nothing(conn, database_url, redis_url, tmp_path):
    small = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="12")
    versions.save(conn, draft(2), small, by=EDITOR)           # 5 pending
    before = counts(conn)
    with pytest.raises(CapacityExceeded) as refused:
        versions.save(conn, draft(4), small, by=EDITOR)       # 9 more: 14 > 12
    assert refused.value.retry_after >= 1
    assert counts(conn) == before


def test_a_content_larger_than_the_whole_capacity_is_bad_input_not_busy(conn, database_url, redis_url, tmp_path):
    tiny = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="4")
    with pytest.raises(InvalidInput, match="MAX_PENDING_TASKS"):
        versions.save(conn, draft(2), tiny, by=EDITOR)


def test_concurrent_saves_never_exceed_capacity(database_url, redis_url, tmp_path):
    limited = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="23")
    start = threading.Barrier(10)

    def save(i):
        with connect(database_url, autocommit=True) as c:
            start.wait()
            try:
                versions.save(c, draft(1, prefix=str(i)), limited, by=EDITOR)   # 3 tasks each
                return True
            except CapacityExceeded:
                return False
    with ThreadPoolExecutor(10) as pool:
        accepted = sum(pool.map(save, range(10)))
    with connect(database_url) as c:
        pending = c.execute("SELECT count(*) AS n FROM tasks WHERE status IN ('ready', 'running', 'retry')"
                            ).fetchone()["n"]
    assert accepted == 7 and pending == 21


def test_pending_tasks_are_counted_per_key_through_saves_supersedes_and_cancels(conn, cfg):
    a = versions.save(conn, draft(2), cfg, by=keyed(1))       # 5 pending, key 1
    assert_pending_counts(conn)
    b = versions.save(conn, draft(3), cfg, by=keyed(2))       # 7, key 2
    versions.save(conn, draft(1), cfg, by=EDITOR)                     # 3, no key
    assert_pending_counts(conn)
    versions.save(conn, draft(2, prefix="new"), cfg, by=keyed(2), content_id=a.content_id, base_version=1)
    assert_pending_counts(conn)                                       # key 1's 5 superseded, 5 more for key 2
    versions.cancel(conn, b.content_id, b.version, by=EDITOR)
    assert_pending_counts(conn)
    row = conn.execute("SELECT pending_tasks() AS total, pending_tasks(1) AS one, pending_tasks(2) AS two").fetchone()
    assert (row["total"], row["one"], row["two"]) == (8, 0, 5)


def test_the_counts_of_a_closed_connection_fold_into_shard_zero_and_every_sum_stays(conn, cfg):
    with connect(cfg.database_url, autocommit=True) as other:
        versions.save(other, draft(2), cfg, by=keyed(3))
        pid = other.info.backend_pid
    wait_until(lambda: conn.execute("SELECT count(*) AS n FROM pg_stat_activity WHERE pid = %s",
                                    (pid,)).fetchone()["n"] == 0)
    versions.save(conn, draft(1), cfg, by=keyed(3))           # this connection's own row stays
    sums = "SELECT pending_tasks() AS total, pending_tasks(3) AS mine"
    before = conn.execute(sums).fetchone()
    assert conn.execute("SELECT n FROM pending_counts WHERE shard = %s", (pid,)).fetchone()["n"] == 5
    db.all(conn, "admission_fold_counts")
    assert conn.execute("SELECT count(*) AS n FROM pending_counts WHERE shard = %s", (pid,)).fetchone()["n"] == 0
    assert conn.execute("SELECT n FROM pending_counts WHERE shard = 0 AND key_id = 3").fetchone()["n"] == 5
    assert conn.execute("SELECT n FROM pending_counts WHERE shard = pg_backend_pid()").fetchone()["n"] == 3
    assert conn.execute(sums).fetchone() == before == {"total": 8, "mine": 8}
    assert_pending_counts(conn)
