"""The review workflow's pure rules: the comparison, regeneration marks, locales, download names, and the
delivery gate's withdrawn approval."""

from __future__ import annotations

import pytest

from pipeline.core.compare import Side, compare, text_diff
from pipeline.core.content import (carry_regenerations, check_speakable, download_name, parse_draft,
                                   plan_tasks, with_regeneration)
from pipeline.core.delivery import delivery_blockers
from pipeline.core.errors import InvalidInput
from providers import local_tts
from providers.registry import SPEECH_LOCALES

PROVIDERS = {"image": {"provider": "local", "model": "card", "size": "1024x1024"},
             "tts": {"provider": "local", "model": "espeak", "voice": ""}, "bundle": {}}


def draft(*texts: str):
    return parse_draft({"title": "t", "locale": "zh-CN",
                        "blocks": [{"key": f"b{i}", "text": t} for i, t in enumerate(texts, 1)]})


def test_a_text_diff_marks_what_was_deleted_and_inserted_by_character():
    assert text_diff("我们在学校学习", "我们在公园学习") == [
        {"op": "equal", "text": "我们在"}, {"op": "delete", "text": "学校"}, {"op": "insert", "text": "公园"},
        {"op": "equal", "text": "学习"}]
    assert text_diff("same", "same") == [{"op": "equal", "text": "same"}]


def test_an_english_text_diff_marks_whole_words_not_letters():
    # "flowers" -> "tulips" used to read "ftulowerips": letters of both words interleaved
    assert text_diff("We saw the red flowers.", "We saw the red tulips.", "en-US") == [
        {"op": "equal", "text": "We saw the red "}, {"op": "delete", "text": "flowers"},
        {"op": "insert", "text": "tulips"}, {"op": "equal", "text": "."}]
    assert text_diff("a big dog", "a small cat", "en") == [
        {"op": "equal", "text": "a "}, {"op": "delete", "text": "big dog"}, {"op": "insert", "text": "small cat"}]


@pytest.mark.parametrize("locale", ["zh-CN", "ja", "cmn-Hans", "th-TH"])
def test_a_text_diff_in_a_language_without_spaces_between_words_goes_by_character(locale):
    assert text_diff("我们在学校学习", "我们在公园学习", locale)[1:3] == [
        {"op": "delete", "text": "学校"}, {"op": "insert", "text": "公园"}]


def test_chinese_inside_an_english_text_is_still_compared_by_character():
    assert text_diff("I study 中文 at 学校", "I study 中文 at 公园", "en") == [
        {"op": "equal", "text": "I study 中文 at "}, {"op": "delete", "text": "学校"},
        {"op": "insert", "text": "公园"}]


def test_compare_diffs_by_the_locale_of_the_newer_version():
    blocks = [{"key": "a", "text": "the red flowers"}]
    old = Side(1, "t", "en-GB", None, blocks)
    new = Side(2, "t", "en-GB", None, [{"key": "a", "text": "the red tulips"}])
    assert compare(old, new)["blocks"][0]["text_diff"][1:] == [{"op": "delete", "text": "flowers"},
                                                               {"op": "insert", "text": "tulips"}]


def test_a_regeneration_mark_changes_only_its_own_media_fingerprint():
    plain = draft("一", "二")
    marked = plain.__class__(plain.title, plain.locale, plain.theme,
                             (with_regeneration(plain.blocks[0], "image", "n1"), plain.blocks[1]))
    before = {t.ref: t.fingerprint for t in plan_tasks(plain, PROVIDERS)}
    after = {t.ref: t.fingerprint for t in plan_tasks(marked, PROVIDERS)}
    assert {ref for ref in before if before[ref] != after[ref]} == {"image:b1", "bundle:"}
    # an ordinary block's snapshot and the draft's digest are as they always were
    assert "regeneration" not in plain.blocks[0].as_dict() and plain.digest == draft("一", "二").digest


def test_a_later_draft_keeps_marks_while_the_media_input_is_the_same():
    base = [{"key": "b1", "text": "一", "image_prompt": None, "regeneration": {"image": "n1", "tts": "n2"}},
            {"key": "b2", "text": "二", "image_prompt": None, "regeneration": {"tts": "n3"}}]
    carried = carry_regenerations(draft("一", "二改"), base)
    assert dict(carried.blocks[0].regeneration) == {"image": "n1", "tts": "n2"}
    assert carried.blocks[1].regeneration == ()   # its text changed: a new input anyway, the mark is gone


def test_compare_says_reused_new_and_superseded_per_media():
    def side(version, blocks, fingerprints):
        tasks = [{"id": i, "kind": kind, "block_key": key, "status": "succeeded", "fingerprint": fp,
                  "asset_sha256": fp * 2, "input": {}, "cost": 0.5}
                 for i, ((kind, key), fp) in enumerate(fingerprints.items())]
        return Side(version, "t", "zh-CN", None, blocks, tasks)
    old = side(1, [{"key": "a", "text": "x"}, {"key": "b", "text": "y"}],
               {("image", "a"): "1", ("tts", "a"): "2", ("image", "b"): "3", ("tts", "b"): "4"})
    new = side(2, [{"key": "a", "text": "x2"}, {"key": "c", "text": "z"}],
               {("image", "a"): "5", ("tts", "a"): "2", ("image", "c"): "6", ("tts", "c"): "7"})
    doc = compare(old, new)
    assert [(m["block"], m["kind"], m["change"]) for m in doc["media"]] == [
        ("a", "image", "new"), ("a", "tts", "reused"), ("c", "image", "new"), ("c", "tts", "new"),
        ("b", "image", "superseded"), ("b", "tts", "superseded")]
    assert [b["change"] for b in doc["blocks"]] == ["changed", "added", "removed"]
    assert doc["cost"] == {"from": 2.0, "to": 2.0}


@pytest.mark.parametrize("locale, ok", [("zh-CN", True), ("zh", True), ("cmn-Hans", True), ("en-GB", True),
                                        ("fr-FR", False), ("zhx", False), ("english", False)])
def test_the_local_speech_provider_refuses_at_save_what_it_could_not_speak(locale, ok):
    supported = SPEECH_LOCALES["local"]
    if ok:
        check_speakable(locale, supported)
        local_tts.choose_voice(locale, None, "text")   # and the provider itself speaks it
    else:
        with pytest.raises(InvalidInput) as refused:
            check_speakable(locale, supported)
        assert refused.value.field == "locale" and "zh" in str(refused.value) and "en" in str(refused.value)
    check_speakable(locale, SPEECH_LOCALES["openai"])   # a model that reads any language refuses nothing


@pytest.mark.parametrize("title, name", [("校园生活", "校园生活-v3.zip"), ("Lesson 1: Family / Home?", "Lesson-1-Family-Home-v3.zip"),
                                         ("../..", "content-v3.zip"), ("a" * 300, "a" * 80 + "-v3.zip")])
def test_download_names_keep_letters_of_any_script_and_nothing_unsafe(title, name):
    assert download_name(title, 3) == name


def test_a_withdrawn_approval_is_a_reason_not_to_deliver_with_who_and_why():
    rows = [{"id": 1, "status": "succeeded"}]
    withdrawn = {"version": 2, "by": "r", "at": "2026-01-01T00:00:00+00:00", "note": "licence"}
    blockers = delivery_blockers(None, 2, rows, withdrawn)
    assert blockers.reasons == ("not_approved", "approval_withdrawn")
    assert blockers.as_dict()["withdrawn"] == withdrawn
    assert delivery_blockers(2, 2, rows, withdrawn).reasons == ()


def test_a_regenerations_variation_gives_the_local_image_provider_another_picture_of_the_same_prompt():
    from providers.local_image import encode_webp, render_card
    plain, again = (encode_webp(render_card("早上七点", 128, 128)) for _ in range(2))
    varied = encode_webp(render_card("早上七点", 128, 128, variation="0f3a"))
    assert plain == again and varied != plain


def test_a_diff_of_long_texts_is_bounded_and_still_exact():
    import time
    # 100 blocks of 3,000 characters, every one changed in two places: the worst a compare can ask for
    base = "".join(f"第{i}句，我们在学校学习中文。" for i in range(200))[:3000]
    pairs = [(base, base.replace("第10句", f"第十句{n}").replace("第150句", "新句子")) for n in range(100)]
    started = time.process_time()
    diffs = [text_diff(old, new) for old, new in pairs]
    assert time.process_time() - started < 5
    for (old, new), segments in zip(pairs, diffs):
        assert "".join(s["text"] for s in segments if s["op"] != "insert") == old
        assert "".join(s["text"] for s in segments if s["op"] != "delete") == new
        assert any(s["op"] == "insert" and "十" in s["text"] for s in segments)
        assert any(s["op"] == "insert" and "新" in s["text"] for s in segments)
