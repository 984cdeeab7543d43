"""The state machine's enums, the decision codes and the kinds are the same in Python and in PostgreSQL."""

import pytest

from pipeline.core.outcome import Reason
from pipeline.core import kinds
from pipeline.core.states import TaskStatus

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def test_the_python_and_postgresql_enums_agree(conn):
    rows = conn.execute("SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
                        "WHERE t.typname = 'task_status' ORDER BY e.enumsortorder").fetchall()
    assert [r["enumlabel"] for r in rows] == [m.value for m in TaskStatus]


def test_a_migrated_database_holds_a_row_for_every_registered_kind_as_the_registry_says(conn):
    # given a database migrated by bin/migrate's function, then each kind's row says what its module says
    rows = conn.execute("SELECT name, per_block, paid, shared, completes_version FROM task_kinds ORDER BY name")
    assert {r["name"]: (r["per_block"], r["paid"], r["shared"], r["completes_version"]) for r in rows} == {
        k.name: (k.per_block, k.paid, k.shared, k.completes_version) for k in kinds.every()}
    assert {"image", "tts", "video", "bundle"} <= set(kinds.names())


def test_the_python_and_postgresql_decision_codes_agree(conn):
    rows = conn.execute("SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
                        "WHERE t.typname = 'task_reason' ORDER BY e.enumsortorder").fetchall()
    assert [r["enumlabel"] for r in rows] == [m.value for m in Reason]
