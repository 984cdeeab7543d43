from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest

from pipeline import migrations
from pipeline.db import connect
from testkit import schemafunctions
from testkit.schemadump import describe

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

SNAPSHOT = Path(migrations.SCHEMA_DIR) / "snapshot.txt"


def test_migrating_an_empty_database_reproduces_the_recorded_schema(empty_database_url, tmp_path):
    # given an empty database, when every migration runs
    applied = migrations.migrate(empty_database_url)
    # then all files were applied and the schema is the one recorded in schema/snapshot.txt
    assert [m.version for m in applied] == [m.version for m in migrations.discover()]
    actual = describe(empty_database_url)
    if actual != SNAPSHOT.read_text():
        (tmp_path / "snapshot.actual.txt").write_text(actual)
        pytest.fail(f"schema differs from {SNAPSHOT}; if the change is intended, regenerate it with "
                    f"`.venv/bin/python -m testkit.schemadump --fresh > schema/snapshot.txt` (actual: {tmp_path}/snapshot.actual.txt)")


def test_schema_functions_hold_the_current_text_of_every_function_and_trigger(empty_database_url):
    """schema/functions/ is what runs: running its files on a migrated database changes no function or trigger,
    and it names every one (a file for a function the migrations dropped, or one a migration changed without the
    file, fails here)."""
    migrations.migrate(empty_database_url)
    with psycopg.connect(empty_database_url) as conn:
        migrated = schemafunctions.current(conn)
        files = schemafunctions.bodies()
        assert sorted(files) == sorted(migrated), "regenerate: .venv/bin/python -m testkit.schemafunctions --fresh"
        for name, text in files.items():
            conn.execute(text)
        rerun = schemafunctions.current(conn)
        conn.rollback()
    changed = sorted(name for name in migrated if rerun[name] != migrated[name])
    assert changed == [], ("schema/functions/ differs from the migrations for these; regenerate: "
                           ".venv/bin/python -m testkit.schemafunctions --fresh")


def test_two_concurrent_migrate_runs_apply_each_migration_exactly_once(empty_database_url):
    # when two migrate runs start at the same time on an empty database
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: migrations.migrate(empty_database_url), range(2)))
    # then between them they applied every migration once (each in its own transaction, under the lock), in order,
    # and each migration is recorded once
    applied = sorted(m.version for r in results for m in r)
    assert applied == [m.version for m in migrations.discover()]
    assert all([m.version for m in r] == sorted(m.version for m in r) for r in results)
    with connect(empty_database_url) as conn:
        rows = conn.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()
    assert [r["version"] for r in rows] == [m.version for m in migrations.discover()]
    assert migrations.migrate(empty_database_url) == []


def test_a_database_whose_applied_migration_changed_is_refused(database_url):
    # given a database whose record says migration 1 had other content
    with psycopg.connect(database_url) as conn:
        conn.execute("UPDATE schema_migrations SET checksum = 'edited' WHERE version = 1")
    # then migrate refuses, naming the file, and changes nothing
    with pytest.raises(migrations.MigrationError, match="0001_core.sql changed after it was applied"):
        migrations.migrate(database_url)


def test_a_database_newer_than_the_code_is_refused(database_url):
    with psycopg.connect(database_url) as conn:
        conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (999, 'future', 'x')")
    with pytest.raises(migrations.MigrationError, match="migration 0999, which no file"):
        migrations.migrate(database_url)


def test_errors_recorded_before_decision_codes_get_the_code_their_text_names(empty_database_url):
    # given tasks whose last errors were recorded before migration 0005 (text only)
    files = migrations.discover()
    migrations.migrate(empty_database_url, files[:4])
    texts = {"outcome unknown (Ambiguous: read timeout)": "unknown_outcome",
             "busy (WaitingForInput: task 7 (running) is making the same input)": "waiting_input",
             "busy (BudgetReached: paused: daily budget reached)": "budget", "busy (Busy: 429)": "busy",
             "Transient: refused": "transient", "Permanent: HTTP 400": "permanent_error",
             "deadline passed": "deadline_passed", "lease expired before the provider was called": "lease_expired",
             "resolved: checked the vendor": "resolved", "something else": None}
    with connect(empty_database_url, autocommit=True) as conn:
        conn.execute("INSERT INTO contents (title, locale, current_version) VALUES ('t', 'zh', 1)")
        conn.execute("INSERT INTO versions (content_id, version, title, locale, blocks, digest, saved_by, deadline_at) "
                     "VALUES (1, 1, 't', 'zh', '[]', 'd', 'e', now())")
        for i, text in enumerate(texts):
            conn.execute("INSERT INTO tasks (content_id, version, kind, block_key, input, fingerprint, status, "
                         "max_attempts, deadline_at, last_error) VALUES (1, 1, 'image', %s, '{}', repeat('a', 64), "
                         "'failed', 3, now(), %s)", (f"b{i}", text))
    # when the migration runs, then each error has the code its text names (the words the board searched for)
    migrations.migrate(empty_database_url)
    with connect(empty_database_url) as conn:
        found = {r["last_error"]: r["last_error_code"]
                 for r in conn.execute("SELECT last_error, last_error_code::text AS last_error_code FROM tasks")}
    assert found == texts
