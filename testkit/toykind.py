"""A kind that exists only to prove a kind is one module: `wordcount`, per block, the number of words of its text,
as a small JSON file. Local work. tests/integration/web/test_toy_kind.py adds it with KINDS_FROM alone."""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.core.kinds import Kind
from pipeline.core.records import Made, Work


def plan(setup, draft, block, planned) -> dict:
    return {"kind": "words", "text": block.text}


def make(work: Work, out: Path) -> Made:
    out.write_text(json.dumps({"words": len(work.task.input["text"].split())}))
    return Made("application/json")


KIND = Kind("wordcount", "words", per_block=True, plan=plan, word="word count", work="testkit.toykind:make")
