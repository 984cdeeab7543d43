#!/usr/bin/env python3
"""Where PostgreSQL's CPU per media task goes: statements, their planning, autovacuum, and the rest.

`bench/peers.py` measures PostgreSQL's CPU per task of ours (every process of the server, from /proc) but not what
it is spent on. This runs the same workload (`bench/engine_overhead.py`'s `run_ours`: lessons saved while the
workers wait, the instant provider, the full durable path) on a server with `pg_stat_statements` (top-level
statements, planning timed) and every autovacuum and autoanalyze logged with the CPU it used, and splits the CPU of
the run's window:

* statements: the server time of the top-level statements sent in the window (execution and planning; a function's
  inner statements are inside its call), the largest by name;
* autovacuum: the CPU the server's own log gives for each automatic vacuum and analyze that ended in the window
  (0.01 s steps); a window of a few seconds may hold none, which says nothing of its share over hours;
* the rest: everything else: the backends' work outside statement execution (the protocol, the commit's WAL
  insertion and flush request), the background processes, and this benchmark's own progress reads (one every
  0.1 s), whose statements are left out of the list.

Timer figures of `pg_stat_statements` are wall time inside the server, so a statement waiting on a lock or an I/O
counts there without using CPU (with one worker only the driver's saves share rows with it).

    .venv/bin/python bench/pg_breakdown.py [--tasks 600] [--workers 1] [--blocks 10] [--repeats 3] [--inside]
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import Stack, run_main, servers  # noqa: E402
from bench.report import median, print_machine, say, table  # noqa: E402
from bench.engine_overhead import run_ours  # noqa: E402
from bench.measure import statement_rows  # noqa: E402
from pipeline.db import connect  # noqa: E402

AUTOVACUUM_CPU = re.compile(r"automatic (?:aggressive )?(vacuum|analyze)(?: to prevent wraparound)? of table .*?"
                            r"CPU: user: ([\d.]+) s, system: ([\d.]+) s", re.DOTALL)


def configure(stack: Stack, inside: bool) -> None:
    with connect(stack.pg.url(), autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET pg_stat_statements.track = '{'all' if inside else 'top'}'")
        conn.execute("ALTER SYSTEM SET pg_stat_statements.track_planning = on")
        conn.execute("ALTER SYSTEM SET log_autovacuum_min_duration = 0")
        conn.execute("SELECT pg_reload_conf()")


def autovacuum_seconds(log: Path, start: int, end: int) -> dict[str, float]:
    """CPU seconds of the automatic vacuums and analyzes the server logged between two offsets of its log."""
    with open(log, "rb") as handle:
        handle.seek(start)
        text = handle.read(end - start).decode(errors="replace")
    found = {"vacuum": 0.0, "analyze": 0.0}
    for entry in re.split(r"\n(?=\S)", text):   # a log entry and its indented lines
        match = AUTOVACUUM_CPU.search(entry)
        if match:
            found[match.group(1)] += float(match.group(2)) + float(match.group(3))
    return found


def statements(stack: Stack) -> tuple[dict[str, float], dict[str, float], dict[str, float]]:
    """Milliseconds of server time (execution + planning) per named top-level statement, of planning alone, and
    of each statement run inside a function (by its first words), in the bench database."""
    with stack.db() as conn:
        rows = statement_rows(conn, stack.dbname)
    top: dict[str, float] = {}
    planning: dict[str, float] = {}
    inner: dict[str, float] = {}
    for row in rows:
        if not row["toplevel"]:
            inner[row["text"][:90]] = inner.get(row["text"][:90], 0.0) + row["exec_ms"]
            continue
        name = row["name"] or ("BEGIN / COMMIT" if row["text"] in ("begin", "commit") else "other")
        top[name] = top.get(name, 0.0) + row["exec_ms"] + row["plan_ms"]
        planning[name] = planning.get(name, 0.0) + row["plan_ms"]
    return top, planning, inner


def one_run(stack: Stack, args: argparse.Namespace, tag: str) -> tuple[dict, dict, dict]:
    marks: dict = {}

    def at_start() -> None:
        with stack.db() as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        marks["start"] = stack.pg.log.stat().st_size

    def at_end() -> None:   # read where the window's CPU is read, before the workers stop
        marks["end"] = stack.pg.log.stat().st_size
        marks["statements"] = statements(stack)

    run = run_ours(stack, "simple", args.workers, args.tasks, args.blocks, tag, at_start=at_start, at_end=at_end)
    top, planning, inner = ({name: ms / run.items for name, ms in found.items()} for found in marks["statements"])
    vacuum = autovacuum_seconds(stack.pg.log, marks["start"], marks["end"])
    whole = {"PostgreSQL CPU": run.cpu.postgres * 1000 / run.items,
             "autovacuum": vacuum["vacuum"] * 1000 / run.items, "autoanalyze": vacuum["analyze"] * 1000 / run.items,
             "statements": sum(top.values()), "planning": sum(planning.values()), "tasks/s": run.rate}
    say(f"  {tag}: {run.items} tasks, {run.rate:.1f}/s; PostgreSQL {whole['PostgreSQL CPU']:.2f} ms a task")
    return whole, top, inner


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=600)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--blocks", type=int, default=10, help="blocks per lesson (2 tasks each and a bundle)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=12, help="statements listed")
    parser.add_argument("--inside", action="store_true",
                        help="also time the statements run inside our functions (pg_stat_statements.track = all)")
    args = parser.parse_args(argv)
    with servers(statements=True) as stack:
        print_machine(stack)
        configure(stack, args.inside)
        runs = [one_run(stack, args, f"r{i}") for i in range(args.repeats)]
    wholes = [w for w, _, _ in runs]

    def mid(key: str) -> str:
        return f"{median(w[key] for w in wholes):.3f}"
    rest = median(w["PostgreSQL CPU"] - w["statements"] - w["autovacuum"] - w["autoanalyze"] for w in wholes)
    say(f"\nPostgreSQL per media task of ours, ms, median of {args.repeats} runs with {args.workers} worker(s) "
        f"(median {median(w['tasks/s'] for w in wholes):.1f} tasks/s):")
    say(table(["what", "ms per task"], [
        ["PostgreSQL CPU, all its processes (/proc)", mid("PostgreSQL CPU")],
        ["statements' server time (execution and planning)", mid("statements")],
        ["  of which planning", mid("planning")],
        ["automatic vacuum (CPU, its log)", mid("autovacuum")],
        ["automatic analyze (CPU, its log)", mid("autoanalyze")],
        ["the rest", f"{rest:.3f}"]]))
    for title, index in (("Top-level statements by name", 1), ("Statements inside our functions", 2)):
        parts = [r[index] for r in runs]
        names = sorted({n for p in parts for n in p}, key=lambda n: -median(p.get(n, 0.0) for p in parts))
        if names:
            say(f"\n{title}, ms of server time per task (median):")
            say(table(["statement", "ms per task"],
                      [[n, f"{median(p.get(n, 0.0) for p in parts):.3f}"] for n in names[:args.top]]))
    return 0


if __name__ == "__main__":
    run_main(main)
