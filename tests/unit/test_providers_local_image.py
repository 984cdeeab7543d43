"""The offline image provider: Chinese glyphs, determinism, sizes, wrapping."""

from __future__ import annotations

import hashlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from PIL import Image, ImageFont

from providers.base import GenerateRequest
from providers.errors import Permanent
from providers.local_image import (
    FONT_PATH, LocalImageProvider, card_font, encode_webp, parse_size, render_card, wrap_text,
)

ROOT = Path(__file__).resolve().parents[2]
CHINESE = "校园生活：新生第一天在图书馆里找到了安静的座位。"
NOT_IN_FONT = "\u4e02"  # 丂: a real ideograph outside GB2312, so not in the subset


def glyph(font: ImageFont.FreeTypeFont, char: str) -> bytes:
    mask = font.getmask(char)
    return bytes(mask) + repr(mask.size).encode()


def default_font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def generate(provider: LocalImageProvider, text: str, key: str, **params):
    return provider.generate(GenerateRequest("image", text, params, key))


def test_the_committed_font_draws_chinese_glyphs_not_the_missing_glyph_box():
    font = card_font(64)
    missing = glyph(font, NOT_IN_FONT)
    for char in "校园你好，":
        assert glyph(font, char) != missing, char
    assert glyph(font, "校") != glyph(font, "园")


def test_the_default_font_draws_boxes_for_chinese_so_the_check_above_can_fail():
    font = default_font(64)
    assert glyph(font, "校") == glyph(font, NOT_IN_FONT)


def test_a_chinese_card_differs_from_one_drawn_with_a_font_lacking_cjk():
    with_noto = render_card(CHINESE, 256, 256)
    with_boxes = render_card(CHINESE, 256, 256, font_for=default_font)
    assert with_noto.tobytes() != with_boxes.tobytes()


def test_the_same_prompt_and_params_give_identical_bytes(tmp_path):
    first = generate(LocalImageProvider(tmp_path / "a"), CHINESE, "key-1", size="320x240")
    second = generate(LocalImageProvider(tmp_path / "b"), CHINESE, "key-2", size="320x240")
    assert first.data == second.data
    assert first.provider_request_id != second.provider_request_id  # two real renders


def test_the_same_prompt_gives_identical_bytes_in_another_process():
    code = (
        "import hashlib, sys; from providers.local_image import render_card, encode_webp; "
        "sys.stdout.write(hashlib.sha256(encode_webp(render_card(sys.argv[1], 300, 200))).hexdigest())"
    )
    other = subprocess.run([sys.executable, "-c", code, CHINESE], cwd=ROOT, capture_output=True,
                           text=True, timeout=60, check=True)
    here = hashlib.sha256(encode_webp(render_card(CHINESE, 300, 200))).hexdigest()
    assert other.stdout == here


def test_different_prompts_give_different_bytes(tmp_path):
    provider = LocalImageProvider(tmp_path, size="256x256")
    first = generate(provider, "a red kite over the sea", "key-1")
    second = generate(provider, "a red kite over the sea!", "key-2")
    assert first.data != second.data


def test_the_card_is_webp_of_the_requested_size(tmp_path):
    result = generate(LocalImageProvider(tmp_path), "Lesson 3: the water cycle", "key-1", size="640x360")
    with Image.open(io.BytesIO(result.data)) as image:
        assert (image.format, image.size) == ("WEBP", (640, 360))
    assert result.media_type == "image/webp"
    assert (result.metadata["width"], result.metadata["height"]) == (640, 360)


def test_the_default_card_is_1024_square(tmp_path):
    result = generate(LocalImageProvider(tmp_path), "默认尺寸", "key-1")
    with Image.open(io.BytesIO(result.data)) as image:
        assert image.size == (1024, 1024)


@pytest.mark.parametrize("size", ["big", "1024", "10x10", "5000x5000", "1024x1024x3", "-5x20", ""])
def test_a_bad_size_is_permanent_and_names_the_format(tmp_path, size):
    provider = LocalImageProvider(tmp_path)
    with pytest.raises(Permanent, match="WIDTHxHEIGHT"):
        generate(provider, "anything", "key-1", size=size or " ")


def test_a_bad_default_size_is_refused_at_construction(tmp_path):
    with pytest.raises(Permanent):
        LocalImageProvider(tmp_path, size="huge")


def test_an_empty_prompt_is_permanent(tmp_path):
    with pytest.raises(Permanent, match="empty"):
        generate(LocalImageProvider(tmp_path), "   ", "key-1")


def test_chinese_wraps_between_any_two_characters():
    assert wrap_text("校园生活很好", 2, len) == ["校园", "生活", "很好"]


def test_latin_wraps_between_words_and_cuts_only_words_too_long_for_a_line():
    assert wrap_text("hello big world", 9, len) == ["hello big", "world"]
    assert wrap_text("extraordinarily", 5, len) == ["extra", "ordin", "arily"]


def test_closing_punctuation_never_starts_a_line():
    lines = wrap_text("你好，世界。", 2, len)
    assert lines == ["你好，", "世界。"]
    assert not any(line[0] in "，。" for line in lines)


def test_a_very_long_prompt_is_cut_with_an_ellipsis_and_still_renders():
    card = render_card("很长的文字" * 400, 256, 256)
    assert card.size == (256, 256)


def test_parse_size_reads_width_then_height():
    assert parse_size("1792x1024") == (1792, 1024)


def test_the_font_subset_ships_with_its_licence_and_readme():
    fonts = FONT_PATH.parent
    assert FONT_PATH.stat().st_size > 1_000_000
    assert "SIL OPEN FONT LICENSE Version 1.1" in (fonts / "OFL.txt").read_text(encoding="utf-8")
    assert "fontTools.subset" in (fonts / "README.md").read_text(encoding="utf-8")


def test_the_webp_encoder_is_deterministic_for_one_image():
    image = render_card("same pixels", 200, 200)
    assert encode_webp(image) == encode_webp(image.copy())
