"""The house rules that keep decisions and I/O apart, checked on the source (no servers).

Each floor imports only the floors below it: `providers/` and `receipts/` (the ground floor)
nothing of ours; `pipeline/core/` nothing that does I/O and no pipeline module outside it;
`web/` asks `pipeline/`, never `receipts/`, and runs no query itself; `bin/`, `bench/` and `testkit/` never reach
into `tests/`, and no test module imports another.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OURS = ("pipeline", "providers", "receipts", "web", "bin", "tests", "testkit", "bench")
IO_LIBS = {"psycopg", "psycopg_pool", "redis", "rq", "requests", "flask", "PIL", "urllib3", "socket", "werkzeug"}


def imports_of(path: Path) -> set[str]:
    """Every module a file imports, absolute (relative imports resolved against its package)."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    if path.name == "__init__.py":
        package = ".".join(path.relative_to(ROOT).parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{alias.name}" for alias in node.names}
    return found


def source_of(module: str) -> Path | None:
    """The file of one of our modules (package or module), or None for anything else."""
    candidate = ROOT.joinpath(*module.split("."))
    for path in (candidate.with_suffix(".py"), candidate / "__init__.py"):
        if path.is_file():
            return path
    return None


def closure(start: list[Path]) -> dict[str, set[str]]:
    """file -> modules it imports, for `start` and every file of ours they import, transitively."""
    seen: dict[str, set[str]] = {}
    todo = list(start)
    while todo:
        path = todo.pop()
        key = str(path.relative_to(ROOT))
        if key in seen:
            continue
        seen[key] = imports_of(path)
        for module in seen[key]:
            parts = module.split(".")
            for end in range(1, len(parts) + 1):   # a package's __init__ runs before its modules
                found = source_of(".".join(parts[:end]))
                if found is not None and str(found.relative_to(ROOT)) not in seen:
                    todo.append(found)
    return seen


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_the_core_and_everything_it_imports_do_no_io_and_stay_in_the_core():
    found = closure(files("pipeline/core"))
    for path, modules in found.items():
        for module in modules:
            top = module.split(".")[0]
            assert top not in IO_LIBS, f"{path} imports {module}: pipeline/core does no I/O"
            if top == "pipeline":
                assert module == "pipeline" or module.startswith("pipeline.core"), \
                    f"{path} imports {module}: pipeline/core imports no pipeline module outside it"
            assert top not in ("web", "bin", "receipts", "tests", "testkit"), f"{path} imports {module}"


def test_importing_the_core_loads_no_io_library():
    core = [".".join(p.relative_to(ROOT).with_suffix("").parts) for p in files("pipeline/core")]
    names = [m[: -len(".__init__")] if m.endswith(".__init__") else m for m in core]
    code = (f"import sys\nfor name in {names!r}: __import__(name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules}))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert not IO_LIBS & set(ast.literal_eval(loaded.stdout.strip()))


@pytest.mark.parametrize("floor", ["providers", "receipts"])
def test_the_ground_floor_imports_nothing_of_ours_above_it(floor):
    for path in files(floor):
        above = sorted(m for m in imports_of(path) if m.split(".")[0] in OURS and m.split(".")[0] != floor)
        assert not above, f"{path.relative_to(ROOT)} imports {above[0]}: {floor}/ is the ground floor"


def test_the_pipeline_never_imports_the_web_bin_or_tests():
    for path in files("pipeline"):
        up = sorted(m for m in imports_of(path) if m.split(".")[0] in ("web", "bin", "tests", "testkit", "bench"))
        assert not up, f"{path.relative_to(ROOT)} imports {up[0]}"


def test_the_web_asks_the_pipeline_for_receipts_and_media():
    for path in files("web"):
        direct = sorted(m for m in imports_of(path) if m.split(".")[0] in ("receipts", "providers"))
        assert not direct, f"{path.relative_to(ROOT)} imports {direct[0]}: web/ asks pipeline/"


def test_the_web_runs_no_query_itself():
    for path in files("web"):
        direct = sorted(m for m in imports_of(path) if m == "pipeline.db" or m.startswith("pipeline.db."))
        assert not direct, f"{path.relative_to(ROOT)} imports {direct[0]}: queries live in pipeline/, asked by name"


@pytest.mark.parametrize("folder", ["bin", "bench", "testkit"])
def test_commands_benchmarks_and_the_test_kit_never_reach_into_the_tests(folder):
    scripts = [p for p in (ROOT / folder).iterdir() if p.is_file() and not p.suffix
               and p.read_bytes()[:2] == b"#!" and b"python" in p.read_bytes()[:100]]
    for path in files(folder) + scripts:
        into = sorted(m for m in imports_of(path) if m.split(".")[0] == "tests")
        assert not into, f"{path.relative_to(ROOT)} imports {into[0]}: shared tools live in testkit/"


def test_no_test_module_imports_another():
    # a helper two test modules need is a tool: it lives in testkit/ (or a conftest's fixture), where it is found
    for path in files("tests"):
        into = sorted(m for m in imports_of(path) if m.split(".")[0] == "tests" and m.split(".")[-1].startswith("test_"))
        assert not into, f"{path.relative_to(ROOT)} imports {into[0]}: shared tools live in testkit/"


def test_tests_are_sorted_by_kind():
    kinds = {"unit", "integration", "acceptance"}
    assert kinds <= {p.name for p in (ROOT / "tests").iterdir() if p.is_dir()}
    strays = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").rglob("test_*.py")
                    if p.relative_to(ROOT / "tests").parts[0] not in kinds)
    assert not strays, f"tests outside tests/unit, tests/integration, tests/acceptance: {strays}"


def test_unit_tests_ask_for_no_server():
    servers = {"database_url", "empty_database_url", "redis_url", "servers", "conn", "cfg", "rt", "app", "api",
               "work", "tokens", "fake", "system", "stack", "make_stack"}
    for path in files("tests/unit"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                asked = {a.arg for a in node.args.args} & servers
                assert not asked, f"{path.relative_to(ROOT)}::{node.name} asks for {sorted(asked)}: not a unit test"
