"""Where the suite's time goes: a `pytest --durations=0` report grouped by folder, by phase and by test module.

Usage: .venv/bin/python -m pytest -q --durations=0 > run.log; .venv/bin/python bench/suite_durations.py run.log

Setup is mostly fixtures (servers, databases, stacks of processes), call the test's own work, teardown the
stopping of what it started. Prints seconds per folder and phase, and the slowest modules.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict

LINE = re.compile(r"^(?P<seconds>[0-9.]+)s (?P<phase>setup|call|teardown) +(?P<test>tests/\S+?)::")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    by_folder: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    by_module: dict[str, float] = defaultdict(float)
    tests: dict[str, set[str]] = defaultdict(set)
    with open(argv[0], encoding="utf-8", errors="replace") as report:
        for line in report:
            found = LINE.match(line)
            if not found:
                continue
            path, seconds = found["test"], float(found["seconds"])
            folder = "/".join(path.split("/")[:3]) if path.count("/") > 2 else "/".join(path.split("/")[:2])
            by_folder[folder][found["phase"]] += seconds
            by_module[path] += seconds
            tests[folder].add(line.split()[2])
    total = sum(sum(p.values()) for p in by_folder.values())
    print(f"| folder | tests | setup s | call s | teardown s | total s | share |\n|---|---|---|---|---|---|---|")
    for folder, phases in sorted(by_folder.items(), key=lambda kv: -sum(kv[1].values())):
        spent = sum(phases.values())
        print(f"| {folder} | {len(tests[folder])} | {phases['setup']:.0f} | {phases['call']:.0f} | "
              f"{phases['teardown']:.0f} | {spent:.0f} | {spent / total:.0%} |")
    print(f"\ntotal {total:.0f} s\n\n| slowest modules | s |\n|---|---|")
    for module, spent in sorted(by_module.items(), key=lambda kv: -kv[1])[:15]:
        print(f"| {module} | {spent:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
