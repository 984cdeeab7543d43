"""No dead code: every function and method of ours is called (or named) somewhere other than its definition.

A name that appears once in the whole project (code, tests, benches, templates) is defined and never used.
Functions called by a framework are recognised by their decorators or by overriding a base class's method;
the few found by name at run time are listed with who finds them.
"""

import ast
import re
from collections import Counter
from pathlib import Path

from testkit.system import ROOT

PACKAGES = ("pipeline", "web", "providers", "receipts", "bin", "testkit")
FOUND_BY_NAME = {
    ("bin/gunicorn_conf.py", "on_starting"): "gunicorn calls its server hooks by name",
    ("web/metrics.py", "collect"): "prometheus_client's registry calls a collector's collect",
    ("pipeline/batches.py", "_gathered"): "Batcher.advance dispatches on the batch's state",
    ("pipeline/batches.py", "_uploaded"): "Batcher.advance dispatches on the batch's state",
}


def sources() -> list[Path]:
    found = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    return found + [p for p in (ROOT / "bin").iterdir() if p.is_file() and p.suffix == ""]


def definitions(path: Path):
    """(name, line) of each undecorated module-level function and each method of a class with no base."""
    tree = ast.parse(path.read_text(), str(path))
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.decorator_list:
            yield node.name, node.lineno
        if isinstance(node, ast.ClassDef) and not node.bases:
            for member in node.body:
                if (isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)) and not member.decorator_list
                        and not member.name.startswith("__")):
                    yield member.name, member.lineno


def test_every_function_is_used_somewhere_else():
    readers = list((ROOT / "tests").rglob("*.py")) + list((ROOT / "bench").rglob("*.py"))
    readers += list((ROOT / "web" / "templates").rglob("*.html"))
    words = Counter(re.findall(r"\w+", "\n".join(p.read_text() for p in sources() + readers)))
    unused = []
    for path in sources():
        if path.suffix != ".py":
            continue
        relative = str(path.relative_to(ROOT))
        for name, line in definitions(path):
            if (relative, name) not in FOUND_BY_NAME and words[name] == 1:
                unused.append(f"{relative}:{line} {name}")
    assert unused == [], "defined and never used:\n" + "\n".join(unused)


def test_what_is_found_by_name_still_exists():
    for (relative, name), who in FOUND_BY_NAME.items():
        assert name in {n for n, _ in definitions(ROOT / relative)}, f"{relative} {name} ({who}) is gone"


def unused_imports(path: Path):
    """(name, line) of each name a module imports and never uses; a `# noqa` line imports on purpose."""
    text = path.read_text()
    tree = ast.parse(text, str(path))
    lines = text.splitlines()
    imported = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and "noqa" not in lines[node.lineno - 1]:
            if isinstance(node, ast.ImportFrom) and node.module == "__future__":
                continue
            for alias in node.names:
                imported[(alias.asname or alias.name).split(".")[0]] = node.lineno
    used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    used |= {n.value.id for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name)}
    exported = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            exported = {e.value for e in node.value.elts}
    # names quoted in annotations ("from __future__ import annotations" turns every annotation into text)
    quoted = set(re.findall(r"\w+", " ".join(ast.unparse(n.annotation) for n in ast.walk(tree)
                                             if getattr(n, "annotation", None) is not None)))
    for name, line in imported.items():
        if name not in used | exported | quoted:
            yield name, line


def test_every_import_is_used():
    unused = [f"{p.relative_to(ROOT)}:{line} {name}"
              for p in sources() if p.suffix == ".py" and p.name != "__init__.py"
              for name, line in unused_imports(p)]
    assert unused == [], "imported and never used:\n" + "\n".join(unused)
