"""Schema migrations: numbered, forward-only SQL files in `schema/`.

`plan()` decides (pure); `migrate()` applies the missing files, each in its own
transaction under a transaction-level advisory lock, so two concurrent runs are safe (the
second waits, then finds nothing to do) and a pooler in transaction mode is no obstacle. A database whose recorded migrations do
not match the files (edited, renamed or unknown) is refused, never "repaired".
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg.rows import tuple_row

from pipeline import servers
from pipeline.core import kinds
from pipeline.core.errors import PipelineError
from pipeline.settings import Settings

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "schema"
LOCK_KEY = 0x6D656469  # advisory lock id shared by every migrate run
_FILE = re.compile(r"^(?P<version>\d{4})_(?P<name>[a-z0-9_]+)\.sql$")


class MigrationError(PipelineError):
    """The migration files or the database's record of them are inconsistent."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def discover(directory: Path = SCHEMA_DIR) -> list[Migration]:
    found = []
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise MigrationError(f"{path.name}: migration files are named NNNN_lower_case_name.sql")
        found.append(Migration(int(match["version"]), match["name"], path.read_text()))
    numbers = [m.version for m in found]
    if numbers != list(range(1, len(found) + 1)):
        raise MigrationError(f"migration numbers must run 1, 2, 3... without gaps or repeats; found {numbers}")
    return found


def plan(files: list[Migration], recorded: dict[int, str]) -> list[Migration]:
    """The migrations still to apply, or MigrationError when the record contradicts the files."""
    by_version = {m.version: m for m in files}
    for version, checksum in sorted(recorded.items()):
        migration = by_version.get(version)
        if migration is None:
            raise MigrationError(f"the database has migration {version:04d}, which no file in schema/ provides; "
                                 "this code is older than the database")
        if migration.checksum != checksum:
            raise MigrationError(f"schema/{version:04d}_{migration.name}.sql changed after it was applied; "
                                 "migrations are forward-only: add a new file instead")
    return [m for m in files if m.version not in recorded]


_CREATE_TABLE = """CREATE TABLE IF NOT EXISTS schema_migrations (
    version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now())"""


def _recorded(conn: psycopg.Connection) -> dict[int, str]:
    cur = conn.cursor(row_factory=tuple_row)
    if cur.execute("SELECT to_regclass('schema_migrations') IS NULL").fetchone()[0]:
        return {}
    return dict(cur.execute("SELECT version, checksum FROM schema_migrations").fetchall())


def pending(conn: psycopg.Connection, files: list[Migration] | None = None) -> list[Migration]:
    """What `migrate` would apply now; raises MigrationError on a mismatch."""
    return plan(discover() if files is None else files, _recorded(conn))


def register_kinds(conn: psycopg.Connection) -> None:
    """Write every registered kind's row of `task_kinds` (what our SQL reads of a kind; schema/0031_task_kinds.sql),
    once the table exists: a kind added to the registry needs no migration of its own."""
    if conn.execute("SELECT to_regclass('task_kinds') IS NULL").fetchone()[0]:
        return
    with conn.transaction():
        for kind in kinds.every():
            conn.execute("INSERT INTO task_kinds (name, per_block, paid, shared, completes_version) "
                         "VALUES (%s, %s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET per_block = excluded.per_block, "
                         "paid = excluded.paid, shared = excluded.shared, completes_version = excluded.completes_version",
                         (kind.name, kind.per_block, kind.paid, kind.shared, kind.completes_version))


def migrate(url: str, files: list[Migration] | None = None, *, bounds: Settings | None = None) -> list[Migration]:
    """Apply the missing migrations; return what was applied (empty when current).

    `bounds`: also make these settings' connection bounds the role's defaults in the database
    (pipeline/servers.py), which is where connections through a pooler get them."""
    files = discover() if files is None else files
    applied: list[Migration] = []
    # no prepared statements (a pooler may run each transaction on another session); ServerUnusable for a server
    # too old
    with psycopg.connect(url, autocommit=True, connect_timeout=5, prepare_threshold=None) as conn:
        servers.check_version(conn)
        while True:
            with conn.transaction():
                conn.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK_KEY,))
                conn.execute("SET LOCAL statement_timeout = 0")   # a migration may take longer than a request
                conn.execute(_CREATE_TABLE)
                todo = plan(files, _recorded(conn))
                if todo:
                    conn.execute(todo[0].sql.encode())
                    conn.execute("INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                                 (todo[0].version, todo[0].name, todo[0].checksum))
            if not todo:
                break
            applied.append(todo[0])
        register_kinds(conn)
        if bounds is not None:
            servers.write_role_bounds(conn, bounds)
    return applied
