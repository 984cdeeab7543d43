"""A stable text description of a database's schema, for the migration snapshot test.

Regenerate the snapshot after adding a migration:
    .venv/bin/python -m testkit.schemadump --fresh > schema/snapshot.txt
(or run the failing test: it writes the actual description next to the snapshot).
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import psycopg

_QUERIES = {
    "enum": """SELECT t.typname || ': ' || string_agg(e.enumlabel, ', ' ORDER BY e.enumsortorder)
               FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
               JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname = 'public'
               GROUP BY t.typname ORDER BY 1""",
    "column": """SELECT table_name || '.' || column_name || ' ' || udt_name
                        || CASE WHEN is_nullable = 'NO' THEN ' not null' ELSE '' END
                        || coalesce(' default ' || column_default, '')
                 FROM information_schema.columns WHERE table_schema = 'public' ORDER BY table_name, column_name""",
    "constraint": """SELECT conrelid::regclass::text || ' ' || contype::text || ' ' || pg_get_constraintdef(oid)
                     FROM pg_constraint WHERE connamespace = 'public'::regnamespace AND conrelid <> 0
                       AND contype <> 'n'   -- NOT NULL: a row here from PostgreSQL 18 on, only a column's flag
                     ORDER BY 1""",       # before it; the columns above show it on every version
    "index": """SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY tablename, indexname""",
    "function": """SELECT p.oid::regprocedure::text FROM pg_proc p
                   WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1""",
    "trigger": """SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
                  WHERE NOT t.tgisinternal AND c.relnamespace = 'public'::regnamespace ORDER BY c.relname, t.tgname""",
}


def describe(url: str) -> str:
    lines = []
    with psycopg.connect(url) as conn:
        for label, sql in _QUERIES.items():
            lines += [f"{label} {row[0]}" for row in conn.execute(sql)]
    return "\n".join(lines) + "\n"


@contextmanager
def migrated_server() -> Iterator[str]:
    """A new, empty embedded server with every migration run: its URL, for the block's length."""
    import tempfile
    from pathlib import Path

    from bin.embedded import Postgres, free_port
    from pipeline import migrations
    base = Path(tempfile.mkdtemp(prefix="mediapipe-schema-"))
    base.chmod(0o755)
    server = Postgres(base / "pg", free_port(), durable=False)
    server.start()
    try:
        migrations.migrate(server.url())
        yield server.url()
    finally:
        server.stop(mode="immediate")


def fresh() -> str:
    """Describe the schema the migrations build on a new, empty embedded server."""
    with migrated_server() as url:
        return describe(url)


if __name__ == "__main__":
    sys.stdout.write(fresh() if sys.argv[1:] == ["--fresh"] else describe(sys.argv[1]))
