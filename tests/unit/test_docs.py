"""The project's own picture stays true: what docs/architecture.md names exists, and nothing points outside."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ARCHITECTURE = ROOT / "docs" / "architecture.md"


def test_every_test_the_architecture_names_exists():
    text = ARCHITECTURE.read_text()
    named = re.findall(r"(tests/[a-z_/]+\.py)(?:::(test_[a-z0-9_]+))?", text)
    assert len(named) > 20
    for path, name in named:
        source = ROOT / path
        assert source.is_file(), f"docs/architecture.md names {path}, which does not exist"
        if name:
            defined = {node.name for node in ast.walk(ast.parse(source.read_text()))
                       if isinstance(node, ast.FunctionDef)}
            assert name in defined, f"docs/architecture.md names {path}::{name}, which is not defined there"


def test_every_function_the_state_table_names_exists():
    text = ARCHITECTURE.read_text()
    for dotted in sorted(set(re.findall(r"`(pipeline(?:\.[a-z_]+)+(?:\.[A-Za-z_]+)?)`", text))):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):
            try:
                found = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for attr in parts[cut:]:
                assert hasattr(found, attr), f"docs/architecture.md names {dotted}, which does not exist"
                found = getattr(found, attr)
            break


def test_nothing_in_the_project_points_at_files_outside_it():
    outside = re.compile(r"\.\./shared|\b(?:DESIGN|STYLE)\.md\b")
    for path in ROOT.rglob("*"):
        if any(part in path.parts for part in (".git", ".venv", ".data", "__pycache__")) or not path.is_file():
            continue
        if path.suffix in (".py", ".md", ".sh", ".sql", ".txt", ".html", ".ini", ".toml", "") \
                and path.stat().st_size < 2_000_000:
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            assert not outside.search(text), f"{path.relative_to(ROOT)} points outside the project"
