"""A save request validated, and the same input fingerprinted alike (pipeline/core/content.py, fingerprint.py)."""

import pytest

from pipeline.core.content import parse_draft, plan_tasks
from pipeline.core.errors import InvalidInput
from pipeline.core.fingerprint import digest


def test_fingerprints_ignore_key_order_and_whitespace():
    assert digest({"kind": "audio", "text": "你好"}) == digest({"text": "你好", "kind": "audio"})
    assert digest({"kind": "audio", "text": "你好"}) != digest({"kind": "audio", "text": "你好!"})


def test_the_fingerprints_of_an_unchanged_input_stay_what_earlier_releases_stored():
    # given a lesson and its providers, as a release before this one planned them
    draft = parse_draft({"title": "Campus life", "locale": "zh-CN", "theme": "campus",
                         "blocks": [{"key": "a", "text": "你好"},
                                    {"key": "b", "text": "Library", "image_prompt": "a quiet library"}]})
    providers = {"image": {"provider": "openai", "model": "gpt-image-1", "size": "1024x1024"},
                 "tts": {"provider": "openai", "model": "gpt-4o-mini-tts", "voice": "alloy"}, "bundle": {}}
    # when this release plans them, then every fingerprint is the one stored before: a changed word in a hashed
    # input would make nothing stored reusable, and every block would be paid for again
    assert [(t.kind, t.block_key, t.fingerprint[:16]) for t in plan_tasks(draft, providers)] == [
        ("image", "a", "403705877e38b7f6"), ("tts", "a", "0ecf6b5951855521"),
        ("image", "b", "4c723130454c48b8"), ("tts", "b", "ee3929d159f11293"),
        ("bundle", None, "a037c245e5e4ded1")]


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
