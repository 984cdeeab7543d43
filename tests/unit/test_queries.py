"""The named queries and the code agree: every name the code asks for is defined, every defined query is used.

Read from the source, without a database: the query files through `pipeline.db.parse_queries`,
the code through its syntax tree. A name is asked for where it is a literal argument of a
`db.<one|all|scalar|execute|many|iter_rows>(conn, name, ...)` call, or of a call to one of
our functions whose parameter is named `query` or `*_query` (the dispatcher's and the
reconciler's helpers take a query name).
"""

from __future__ import annotations

import ast
from pathlib import Path

from pipeline import db

ROOT = Path(__file__).resolve().parents[2]
CODE = ("pipeline", "web", "bin", "providers", "receipts")
DB_CALLS = {"one", "all", "scalar", "execute", "many", "iter_rows"}


def defined() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted(db.QUERY_DIR.glob("*.sql")):
        for name in db.parse_queries(path.read_text(), path.name):
            assert name not in found, f"{name} is defined in {found[name]} and {path.name}"
            found[name] = path.name
    return found


def trees() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for folder in CODE
            for path in sorted((ROOT / folder).rglob("*.py"))}


def query_parameters(modules: dict[Path, ast.Module]) -> dict[str, int]:
    """function name -> position of its query-name parameter (counting `self` out)."""
    found = {}
    for tree in modules.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names = [a.arg for a in node.args.args if a.arg != "self"]
                for i, name in enumerate(names):
                    if name == "query" or name.endswith("_query"):
                        found[node.name] = i
    return found


def asked() -> dict[str, str]:
    """query name -> where the code asks for it."""
    modules = trees()
    helpers = query_parameters(modules)
    found = {}
    for path, tree in modules.items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "db" \
                    and name in DB_CALLS:
                position = 1
            elif name in helpers:
                position = helpers[name]
            else:
                continue
            if len(node.args) > position and isinstance(node.args[position], ast.Constant) \
                    and isinstance(node.args[position].value, str):
                found[node.args[position].value] = f"{path.relative_to(ROOT)}:{node.lineno}"
    return found


def test_every_query_the_code_asks_for_is_defined():
    queries = defined()
    missing = {name: where for name, where in asked().items() if name not in queries}
    assert not missing, f"asked for but defined in no pipeline/queries/*.sql: {missing}"


def test_every_defined_query_is_used():
    used = asked()
    unused = {name: where for name, where in defined().items() if name not in used}
    assert not unused, f"defined but never asked for: {unused}"


def test_every_query_is_named_after_a_table_and_says_what_it_does():
    for path in sorted(db.QUERY_DIR.glob("*.sql")):
        text = path.read_text()
        first = text.splitlines()[0]
        assert first.startswith("-- ") and not db._HEADER.match(first), \
            f"{path.name} starts with a line saying what the file holds"
        for name, sql in db.parse_queries(text, path.name).items():
            assert "_" in name and sql.strip(), f"{path.name}: {name} is `<table>_<verb>` with a body"
