"""What depends on the PostgreSQL major is marked, so bin/test runs it on every major we promise (15 to 18).

bin/test runs the whole suite once on 18 and, beside it, only the tests marked `server_major` on 15, 16 and 17. A test that
needs the other majors but lacks the mark would pass on 18 alone and no one would know; this test keeps the list
honest. The rule, read from a test module's text (integration and acceptance tests: unit tests reach no server):

- it calls one of our SQL functions (`name(`, every CREATE FUNCTION of schema/*.sql), or drives them through
  testkit.helpers' `claim(` (attempt_claim) or `work_burst(` (a worker's whole attempt, in-process);
- it applies migrations (`migrations.`, `migrate(`, `bin/migrate`, `empty_database_url`);
- it takes locks (`pg_advisory`, `FOR UPDATE`, `SKIP LOCKED`, `LOCK TABLE`, a `.holding(` helper);
- it restarts the server (`.restart(`).

Such a module must carry `pytest.mark.server_major`, as its `pytestmark` or on the tests that qualify. More may be
marked than the rule finds (the whole engine is); tests that run our SQL only through the web or worker processes
are not found by it, and the mark on those is a judgement.
"""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Modules the rule finds that the session's major does not change, and why.
EXEMPT = {
    "tests/acceptance/test_servers.py": "starts PostgreSQL 15 and 18 of its own, whatever --postgres says",
}


def sql_functions() -> set[str]:
    text = "\n".join(path.read_text() for path in sorted((ROOT / "schema").glob("*.sql")))
    return set(re.findall(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+(?:\w+\.)?(\w+)", text, re.IGNORECASE))


def rule() -> re.Pattern:
    functions = "|".join(sorted(sql_functions()))
    return re.compile("|".join([
        rf"\b(?:{functions})\s*\(", r"\b(?:claim|work_burst)\(",
        r"\bmigrations\.", r"\bmigrate\(", r"\bbin[\"/ ]+migrate\b", r"\bempty_database_url\b",
        r"pg_advisory", r"FOR UPDATE", r"SKIP LOCKED", r"LOCK TABLE", r"\.holding\(",
        r"\.restart\(",
    ]))


def needs_the_mark(text: str) -> list[str]:
    """What in `text` makes a test module depend on the server's major (empty: nothing)."""
    return sorted({match.group(0) for match in rule().finditer(text)})


def server_test_modules() -> list[Path]:
    return sorted([*(ROOT / "tests" / "integration").rglob("test_*.py"), *(ROOT / "tests" / "acceptance").rglob("test_*.py")])


def test_our_sql_functions_are_read_from_the_schema():
    assert {"attempt_claim", "attempt_succeed", "admit_save", "wake_slot_waiters", "input_calls_take"} <= sql_functions()


def test_every_test_module_that_depends_on_the_server_major_is_marked():
    unmarked = {}
    for path in server_test_modules():
        name = str(path.relative_to(ROOT))
        text = path.read_text()
        found = needs_the_mark(text)
        if found and name not in EXEMPT and "pytest.mark.server_major" not in text:
            unmarked[name] = found
    assert not unmarked, ("these test modules depend on the PostgreSQL major but are not marked server_major, so "
                          f"bin/test would run them on 18 only; mark them (pytestmark or per test): {unmarked}")


def test_the_exemptions_still_exist_and_still_match_the_rule():
    for name in EXEMPT:
        assert needs_the_mark((ROOT / name).read_text()), f"{name} no longer needs an exemption"


@pytest.mark.parametrize("text, found", [
    ('conn.execute("SELECT * FROM attempt_claim(%s, %s)")', ["attempt_claim("]),
    ("work_burst(rt)", ["work_burst("]),
    ('holder.execute("SELECT pg_advisory_lock(7411003)")', ["pg_advisory"]),
    ("servers.postgres.restart()", [".restart("]),
    ('assert diagnosis["code"] == "lane_paused"', []),   # a name as a word, not a call
])
def test_the_rule_finds_calls_locks_and_restarts_but_not_a_name_in_passing(text, found):
    assert needs_the_mark(text) == found
