"""The docs name only what exists: every `package.module.name`, `path/file.py` and `path/file.py:name`
they cite in backticks is in the tree.

CHANGELOG.md keeps old names on purpose; docs/performance.md's figures name the code of the
commit each measured (CHANGELOG.md maps them to today's).
"""

import importlib
import re

import pytest

from testkit.system import ROOT

DOCS = [ROOT / "README.md"] + sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "performance.md")
PACKAGES = ("pipeline", "web", "providers", "receipts", "bin", "testkit", "bench")
PREFIXES = ("",) + tuple(f"{p}." for p in PACKAGES) + ("pipeline.core.",)
SUFFIXES = {"py", "sql", "txt", "md", "lock", "html", "yml", "json", "jsonl", "png", "toml", "po", "sh", "cfg"}
PATH = re.compile(r"((?:%s|schema|tests|docs)/[\w/.-]+)(?::(\w+))?" % "|".join(PACKAGES))
DOTTED = re.compile(r"([a-z_]+(?:\.[A-Za-z_]\w*)+)(?:\(.*\))?")
COLUMNS = set(re.findall(r"^column (\S+) ", (ROOT / "schema" / "snapshot.txt").read_text(), re.M))


def cited(path):
    return [m.group(1).strip() for m in re.finditer(r"`([^`\n]+)`", path.read_text())]


def module(name):
    for prefix in PREFIXES:
        try:
            return importlib.import_module(prefix + name)
        except ImportError:
            continue
    return None


def resolves(dotted: str) -> bool | None:
    """True or False for a name under one of our modules; None for a name that is not ours to check."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        found = module(".".join(parts[:i]))
        if found is not None:
            for attribute in parts[i:]:
                if not hasattr(found, attribute):
                    return dotted in COLUMNS   # `table.column` reads like a module's name
                found = getattr(found, attribute)
            return True
    return None


def defines(path, name) -> bool:
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{name}\b|^{name}\s*[:=]|^-- {name}:", path.read_text(),
                     re.M) is not None


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_name_a_doc_cites_exists(doc):
    missing = []
    for text in cited(doc):
        if (path := PATH.fullmatch(text)) is not None:
            target = ROOT / path.group(1)
            if not target.exists():
                missing.append(f"{text} (no such file)")
            elif path.group(2) and not defines(target, path.group(2)):
                missing.append(f"{text} (the file defines no {path.group(2)})")
        elif (dotted := DOTTED.fullmatch(text)) is not None and dotted.group(1).rsplit(".", 1)[-1] not in SUFFIXES:
            if resolves(dotted.group(1)) is False:
                missing.append(text)
    assert missing == [], f"{doc.name} cites what does not exist: {missing}"
