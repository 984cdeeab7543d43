"""A save request validated, and the same input fingerprinted alike (pipeline/core/content.py, fingerprint.py)."""

import pytest

from pipeline.core.content import parse_draft
from pipeline.core.errors import InvalidInput
from pipeline.core.fingerprint import digest


def test_fingerprints_ignore_key_order_and_whitespace():
    assert digest({"kind": "audio", "text": "你好"}) == digest({"text": "你好", "kind": "audio"})
    assert digest({"kind": "audio", "text": "你好"}) != digest({"kind": "audio", "text": "你好!"})


@pytest.mark.parametrize("body, field", [
    ({"locale": "zh-CN", "blocks": [{"key": "a", "text": "x"}]}, "title"),
    ({"title": "t", "locale": "zh-CN", "blocks": []}, "blocks"),
    ({"title": "t", "locale": "chinese!", "blocks": [{"key": "a", "text": "x"}]}, "locale"),
    ({"title": "t", "locale": "zh", "blocks": [{"key": "a", "text": "x"}, {"key": "a", "text": "y"}]},
     "blocks[1].key"),
    ({"title": "t", "locale": "zh", "blocks": [{"key": "a", "text": "  "}]}, "blocks[0].text"),
    ({"title": "t", "locale": "zh", "blocks": [{"key": "a/../b", "text": "x"}]}, "blocks[0].key"),
    ({"title": "t", "locale": "zh", "blocks": [{"key": "a", "text": "x" * 2001}]}, "blocks[0].text"),
    ([1, 2], "body"),
    ({"title": "t\x00", "locale": "zh", "blocks": [{"key": "a", "text": "x"}]}, "title"),
    ({"title": "t", "locale": "zh", "blocks": [{"key": "a", "text": "x\ud800"}]}, "blocks[0].text"),
])
def test_bad_content_is_refused_naming_the_field(body, field):
    with pytest.raises(InvalidInput) as refused:
        parse_draft(body)
    assert refused.value.field == field
