"""The database seam: connections and named queries.

SQL lives in `pipeline/queries/*.sql`, one file per table (a query lives with the table
it writes, or for a read with the table it is about; `overview.sql` holds the read models
that join tables for one page, `reconcile.sql` what the reconciler finds due). Each query
is named `<table>_<verb>` and introduced by a `-- name: one-line comment` header. Code
calls queries by name with named parameters (`%(task_id)s`); nothing outside the query
files builds SQL (tests/unit/test_queries.py: every name asked for exists, every query
is used). It knows nothing of tasks; how the system's processes connect is pipeline/servers.py.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterator, Mapping

import psycopg
from psycopg.rows import dict_row

QUERY_DIR = Path(__file__).parent / "queries"
_HEADER = re.compile(r"^-- (?P<name>[a-z][a-z0-9_]*): (?P<doc>.+)$")


def connect(url: str, *, autocommit: bool = False, options: str = "") -> psycopg.Connection:
    """A plain connection that returns rows as dicts, for tools and tests (the system's own processes connect
    with pipeline/servers.py, which adds our bounds). It prepares no statements, so it works through a pooler in
    transaction mode too; `options`: libpq startup options, such as settings.session_options."""
    extra = {"options": options} if options else {}
    return psycopg.connect(url, row_factory=dict_row, autocommit=autocommit, connect_timeout=5,
                           application_name="mediapipe", prepare_threshold=None, **extra)


def parse_queries(text: str, source: str) -> dict[str, str]:
    queries: dict[str, str] = {}
    name, lines = None, []
    for line in text.splitlines():
        match = _HEADER.match(line)
        if match:
            if name:
                queries[name] = "\n".join(lines).strip()
            name, lines = match["name"], []
            if name in queries:
                raise ValueError(f"{source}: query {name!r} is defined twice")
        elif name:
            lines.append(line)
    if name:
        queries[name] = "\n".join(lines).strip()
    return queries


@lru_cache(maxsize=1)
def queries() -> Mapping[str, str]:
    found: dict[str, str] = {}
    for path in sorted(QUERY_DIR.glob("*.sql")):
        for name, sql in parse_queries(path.read_text(), path.name).items():
            if name in found:
                raise ValueError(f"{path.name}: query {name!r} is defined in another file too")
            found[name] = sql
    return found


def execute(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> psycopg.Cursor:
    return conn.execute(queries()[name], params or {})


def one(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> dict | None:
    return execute(conn, name, params).fetchone()


def all(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> list[dict]:  # noqa: A001
    return execute(conn, name, params).fetchall()


def scalar(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> Any:
    row = execute(conn, name, params).fetchone()
    return None if row is None else next(iter(row.values()))


def many(conn: psycopg.Connection, name: str, params: list[Mapping[str, Any]]) -> list[dict]:
    """Run one query for every parameter set in a single batch; the rows each returned, in order."""
    if not params:
        return []
    with conn.cursor() as cur:
        cur.executemany(queries()[name], params, returning=True)
        rows = []
        while True:
            rows.extend(cur.fetchall() if cur.description else [])
            if not cur.nextset():
                return rows


def iter_rows(conn: psycopg.Connection, name: str, params: Mapping[str, Any] | None = None) -> Iterator[dict]:
    yield from execute(conn, name, params)
