"""A kind is one module (pipeline/core/kinds/): outside it no code asks which kind a task is by its name, and no SQL
names a kind; what the rest needs of a kind it reads from the registry (or, in SQL, from the kind's row)."""

import ast
import re
from pathlib import Path

import pytest

from pipeline import settings
from pipeline.core import kinds
from pipeline.core.content import parse_draft, plan_tasks
from pipeline.versions import plan_setup

ROOT = Path(__file__).resolve().parents[2]
KIND_MODULES = ROOT / "pipeline" / "core" / "kinds"
# providers/ is the adapters' floor: it knows media ("image", "audio"), not task kinds
SEARCHED = ("pipeline", "web", "bin")


def _names_a_kind(node: ast.AST) -> bool:
    """`kind`, `task.kind`, `t["kind"]` and the like."""
    if isinstance(node, ast.Name):
        return node.id == "kind" or node.id.endswith("_kind")
    if isinstance(node, ast.Attribute):
        return node.attr == "kind"
    if isinstance(node, ast.Subscript):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "kind"
    return False


def _kind_literals(node: ast.AST) -> set[str]:
    names = set(kinds.names())
    if isinstance(node, ast.Constant) and node.value in names:
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return set().union(*(_kind_literals(e) for e in node.elts)) if node.elts else set()
    return set()


def kind_comparisons(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        if any(_names_a_kind(s) for s in sides) and any(_kind_literals(s) for s in sides):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_no_code_outside_the_kind_modules_asks_which_kind_a_task_is_by_name():
    found = []
    for folder in SEARCHED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if KIND_MODULES not in path.parents:
                found += kind_comparisons(path)
    assert found == [], "asks a kind by its name (read what it needs from pipeline.core.kinds):\n" + "\n".join(found)


def test_the_finder_finds_what_it_looks_for(tmp_path):
    # the test above must be able to fail: each way of asking is found, and other comparisons are not
    source = tmp_path / "asks.py"
    source.write_text('if task.kind == "image":\n    pass\nok = t["kind"] in ("tts", "bundle")\n'
                      'fine = kind == "integer"\nalso = task.status == "image"\n')
    assert kind_comparisons(source.rename(ROOT / "tests" / "unit" / "_asks_tmp.py")) == [
        "tests/unit/_asks_tmp.py:1", "tests/unit/_asks_tmp.py:3"]
    (ROOT / "tests" / "unit" / "_asks_tmp.py").unlink()


def test_no_sql_of_ours_names_a_kind():
    pattern = re.compile("'(" + "|".join(map(re.escape, kinds.names())) + ")'")
    found = []
    for path in [*sorted((ROOT / "pipeline" / "queries").glob("*.sql")),
                 *sorted((ROOT / "schema" / "functions").glob("*.sql"))]:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if not line.lstrip().startswith("--") and pattern.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert found == [], "names a kind (read task_kinds, or take per-kind figures as JSON):\n" + "\n".join(found)


def test_every_kind_waits_only_for_kinds_planned_before_it_and_the_bundle_for_all():
    draft = parse_draft({"title": "t", "locale": "en", "blocks": [{"key": "a", "text": "x"}, {"key": "b", "text": "y"}]})
    plan = plan_tasks(draft, plan_setup(settings.load({})))
    seen = set()
    for task in sorted(plan, key=lambda t: [k.name for k in kinds.every()].index(t.kind)):
        assert set(task.depends_on) <= seen, task.ref
        seen.add(task.ref)
    bundle = next(t for t in plan if kinds.get(t.kind).completes_version)
    assert set(bundle.depends_on) == {t.ref for t in plan} - {bundle.ref}


@pytest.mark.parametrize("name, needs", [("Upper", ()), ("later", ("nothing_yet",))])
def test_a_kind_is_refused_a_bad_name_or_a_wait_for_a_kind_not_registered(name, needs):
    with pytest.raises(ValueError):
        kinds.register(kinds.Kind(name, "thing", per_block=True, plan=lambda *a: {}, needs=needs, work="m:f"))
