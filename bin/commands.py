"""`main(argv) -> int` for every command in bin/: argument parsing and exit codes only.

Exit codes shared by all commands: 0 done, 1 finished with errors (see output),
2 cannot reach PostgreSQL or bad configuration.
"""

from __future__ import annotations

import argparse
import sys

import psycopg

from pipeline import migrations, settings as settings_mod
from pipeline.errors import ConfigError


def _settings():
    try:
        cfg = settings_mod.load()
    except ConfigError as exc:
        print(f"configuration error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    if not cfg.database_url:
        print("DATABASE_URL is not set; bin/dev sets it for the embedded server", file=sys.stderr)
        raise SystemExit(2)
    return cfg


def migrate_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="bin/migrate", description="Apply missing schema migrations.")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 when migrations are missing")
    args = parser.parse_args(argv)
    cfg = _settings()
    try:
        if args.check:
            from pipeline.db import connect
            with connect(cfg.database_url) as conn:
                todo = migrations.pending(conn)
            for m in todo:
                print(f"missing {m.version:04d}_{m.name}")
            return 1 if todo else 0
        applied = migrations.migrate(cfg.database_url)
    except migrations.MigrationError as exc:
        print(f"refused: {exc}", file=sys.stderr)
        return 1
    except psycopg.OperationalError as exc:
        print(f"cannot reach PostgreSQL: {exc}", file=sys.stderr)
        return 2
    for m in applied:
        print(f"applied {m.version:04d}_{m.name}")
    if not applied:
        print("schema is current")
    return 0
