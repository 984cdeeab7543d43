"""What the benchmark scripts print: medians and percentiles, Markdown tables, and the machine and code the
figures belong to (pasted as they are into docs/performance.md)."""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Sequence

if TYPE_CHECKING:
    from bench.common import Stack

ROOT = Path(__file__).resolve().parent.parent


# -- statistics and tables ------------------------------------------------------------------------

def median(values: Iterable[float]) -> float:
    values = list(values)
    return statistics.median(values) if values else float("nan")


def percentile(values: Iterable[float], q: float) -> float:
    """Linear interpolation between closest ranks (q in 0..100)."""
    data = sorted(values)
    if not data:
        return float("nan")
    pos = (len(data) - 1) * q / 100
    low = int(pos)
    high = min(low + 1, len(data) - 1)
    return data[low] + (data[high] - data[low]) * (pos - low)


def fmt(value: object, digits: int = 1) -> str:
    if isinstance(value, float):
        if value != value:
            return "n/a"
        return f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def table(headers: Sequence[str], rows: Iterable[Sequence[object]], digits: int = 1) -> str:
    """A Markdown table (pasted as is into docs/performance.md)."""
    body = [[fmt(cell, digits) for cell in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in body)) if body else len(str(h)) for i, h in enumerate(headers)]
    line = lambda cells: "| " + " | ".join(str(c).ljust(w) for c, w in zip(cells, widths)) + " |"  # noqa: E731
    out = [line(headers), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(r) for r in body]
    return "\n".join(out)


def say(text: str = "") -> None:
    print(text, flush=True)


# -- the machine ----------------------------------------------------------------------------------

def machine() -> dict[str, str]:
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            mem_kb = int(line.split()[1])
    load = " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return {"cpus (nproc)": str(len(os.sched_getaffinity(0))), "cpu model": cpu,
            "memory": f"{mem_kb / 1024 / 1024:.1f} GiB", "kernel": platform.release(),
            "python": platform.python_version(), "load average at start": load}


def print_machine(stack: "Stack | None" = None) -> None:
    info = machine()
    if stack is not None:
        with stack.db() as conn:
            info["postgresql"] = conn.execute("SHOW server_version").fetchone()["server_version"]
            info["fsync / synchronous_commit"] = " / ".join(
                conn.execute(f"SHOW {name}").fetchone()[name] for name in ("fsync", "synchronous_commit"))
        info["valkey"] = stack.redis().info("server")["redis_version"] + " (redis_version)"
    import rq
    info["rq"] = rq.__version__
    info["code"] = code_version()
    say(table(["machine", "value"], info.items()))


ENGINE_DIRS = ("pipeline", "receipts", "providers", "schema", "web")


def engine_digest() -> str:
    """A digest of the engine's files as they are on disk now (they may differ from any commit)."""
    import hashlib
    h = hashlib.sha256()
    for folder in ENGINE_DIRS:
        for path in sorted((ROOT / folder).rglob("*")):
            if path.is_file() and path.suffix in (".py", ".sql"):
                h.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:12]


def code_version() -> str:
    """The commit the figures belong to, and whether the engine's files differ from it."""
    try:
        sha = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *ENGINE_DIRS], cwd=ROOT, capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        sha, dirty = "", ""
    changed = f" + uncommitted changes in {len(dirty.splitlines())} files" if dirty else ""
    return f"{sha or 'unknown'}{changed} (engine files {engine_digest()})"
