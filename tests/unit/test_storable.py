"""Text PostgreSQL cannot store (NUL, a lone surrogate) is refused wherever it sits in a JSON body, naming where."""

from __future__ import annotations

import pytest

from pipeline.core.errors import InvalidInput
from web.inputs import check_storable


@pytest.mark.parametrize("text", ["a\x00b", "\ud800", "x\udfff y", "\x00"])
def test_text_the_database_cannot_store_is_refused_with_its_place_in_the_body(text):
    with pytest.raises(InvalidInput) as refused:
        check_storable({"note": "fine", "items": [{"ok": "yes"}, {"text": text}]})
    assert refused.value.field == "items[1].text"


def test_any_other_text_is_storable():
    body = {"text": "中文 😀 é \t\n", "mixed": ["ok", 1, None, {"deep": ["\U0010ffff", "\ue000"]}]}
    assert check_storable(body) is None
