"""The state machine's enums and the decision codes are the same in Python and in PostgreSQL."""

import pytest

from pipeline.core.outcome import Reason
from pipeline.core.states import TaskKind, TaskStatus

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def test_the_python_and_postgresql_enums_agree(conn):
    for enum, name in ((TaskStatus, "task_status"), (TaskKind, "task_kind")):
        rows = conn.execute("SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
                            "WHERE t.typname = %s ORDER BY e.enumsortorder", (name,)).fetchall()
        assert [r["enumlabel"] for r in rows] == [m.value for m in enum]


def test_the_python_and_postgresql_decision_codes_agree(conn):
    rows = conn.execute("SELECT e.enumlabel FROM pg_enum e JOIN pg_type t ON t.oid = e.enumtypid "
                        "WHERE t.typname = 'task_reason' ORDER BY e.enumsortorder").fetchall()
    assert [r["enumlabel"] for r in rows] == [m.value for m in Reason]
