"""An offline, deterministic image provider: Pillow draws an illustration card.

This module owns the card's look (palette, gradient and shapes seeded by the
sha256 of the prompt; the prompt word-wrapped on a semi-opaque panel, Chinese
wrapped per character) and the `LocalImageProvider` adapter around it. The
same prompt and parameters always give the same WebP bytes: randomness comes
only from our own `random.Random` seeded by the prompt, and text is laid out
with Pillow's BASIC engine so raqm/FriBiDi presence cannot change pixels.

Chinese needs a font with CJK glyphs (Pillow's default has none): the card
uses the committed Noto Sans SC subset in `fonts/` (OFL, see fonts/README.md).
The drawing functions are pure (prompt in, image out); the provider adds the
journal and armed faults of `journal.LocalProvider`. No network, no database.
"""

from __future__ import annotations

import colorsys
import functools
import hashlib
import io
import random
import re
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from .base import GenerateRequest, Result
from .errors import Permanent
from .journal import LocalProvider

FONT_PATH = Path(__file__).resolve().parent / "fonts" / "NotoSansSC-subset.otf"
DEFAULT_SIZE = "1024x1024"
MIN_SIDE, MAX_SIDE = 64, 2048
MAX_PROMPT_CHARS = 4000
WEBP_QUALITY = 85

# One token per CJK character (a line may break between any two of them),
# otherwise runs of non-space characters (Latin words) and runs of spaces.
_CJK = "\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef"
_TOKEN_RE = re.compile(rf"[{_CJK}]|[^\s{_CJK}]+|\s+")
# Closing punctuation must not start a line; it stays on the line before.
_NO_LINE_START = set("，。、！？；：）」』》〉】”’…,.;:!?)]}%")

Measure = Callable[[str], float]
FontFor = Callable[[int], ImageFont.FreeTypeFont]


def parse_size(size: str) -> tuple[int, int]:
    """'WxH' -> (W, H); Permanent unless both sides are whole numbers in range."""
    match = re.fullmatch(r"(\d{1,5})x(\d{1,5})", str(size).strip())
    if match:
        width, height = int(match.group(1)), int(match.group(2))
        if MIN_SIDE <= width <= MAX_SIDE and MIN_SIDE <= height <= MAX_SIDE:
            return width, height
    raise Permanent(
        f"image size {size!r} is invalid: write it as WIDTHxHEIGHT, each side "
        f"{MIN_SIDE}-{MAX_SIDE} pixels, for example {DEFAULT_SIZE!r}"
    )


def _split_long(word: str, max_width: float, measure: Measure) -> list[str]:
    # A word wider than the panel is cut by characters rather than overflowing.
    pieces, current = [], ""
    for char in word:
        if current and measure(current + char) > max_width:
            pieces.append(current)
            current = char
        else:
            current += char
    return [*pieces, current] if current else pieces


def wrap_paragraph(text: str, max_width: float, measure: Measure) -> list[str]:
    """Greedy wrap of one paragraph: Latin by words, CJK by characters."""
    lines: list[str] = []
    line, space = "", False
    for token in _TOKEN_RE.findall(text):
        if token.isspace():
            space = bool(line)
            continue
        candidate = f"{line}{' ' if space else ''}{token}"
        space = False
        if line and (token[0] in _NO_LINE_START or measure(candidate) <= max_width):
            line = candidate
            continue
        if line:
            lines.append(line)
        line = token
        if len(token) > 1 and measure(token) > max_width:
            *done, line = _split_long(token, max_width, measure)
            lines.extend(done)
    if line:
        lines.append(line)
    return lines


def wrap_text(text: str, max_width: float, measure: Measure) -> list[str]:
    """Wrap text to `max_width` as measured by `measure`; newlines start new paragraphs."""
    lines: list[str] = []
    for paragraph in text.splitlines():
        lines.extend(wrap_paragraph(paragraph, max_width, measure))
    return lines


def seeded_rng(prompt: str) -> random.Random:
    """Our only source of randomness: seeded by the sha256 of the prompt."""
    return random.Random(hashlib.sha256(prompt.encode("utf-8")).digest())


def palette(rng: random.Random, count: int = 5) -> list[tuple[int, int, int]]:
    """Harmonious colours: hues spread around a seeded base hue."""
    base = rng.random()
    colours = []
    for index in range(count):
        hue = (base + index * rng.uniform(0.08, 0.22)) % 1.0
        red, green, blue = colorsys.hsv_to_rgb(hue, rng.uniform(0.35, 0.8), rng.uniform(0.55, 0.95))
        colours.append((round(red * 255), round(green * 255), round(blue * 255)))
    return colours


def _background(width: int, height: int, colours: list, rng: random.Random) -> Image.Image:
    mask = Image.linear_gradient("L").resize((width, height))
    if rng.random() < 0.5:
        mask = mask.transpose(Image.Transpose.ROTATE_90).resize((width, height))
    top = Image.new("RGBA", (width, height), colours[0] + (255,))
    bottom = Image.new("RGBA", (width, height), colours[1] + (255,))
    return Image.composite(bottom, top, mask)


def _shapes(card: Image.Image, colours: list, rng: random.Random) -> Image.Image:
    width, height = card.size
    layer = Image.new("RGBA", card.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    for _ in range(rng.randint(6, 10)):
        colour = (*rng.choice(colours[2:]), rng.randint(60, 150))
        cx, cy = rng.uniform(0, width), rng.uniform(0, height * 0.7)
        radius = rng.uniform(0.06, 0.28) * min(width, height)
        box = (cx - radius, cy - radius, cx + radius, cy + radius)
        shape = rng.choice(("ellipse", "rectangle", "triangle"))
        if shape == "ellipse":
            draw.ellipse(box, fill=colour)
        elif shape == "rectangle":
            draw.rounded_rectangle(box, radius=radius * 0.2, fill=colour)
        else:
            draw.polygon([(cx, cy - radius), (cx + radius, cy + radius), (cx - radius, cy + radius)], fill=colour)
    for _ in range(width * height // 3000):
        # A light speckle gives texture; positions come from the seeded generator.
        x, y = rng.randrange(width), rng.randrange(height)
        draw.point((x, y), fill=(255, 255, 255, rng.randint(40, 120)))
    return Image.alpha_composite(card, layer)


def panel_padding(size: int) -> int:
    return round(size * 0.9)


def text_width(width: int, size: int) -> float:
    """Room for text inside the panel (84 % of the card) at font `size`."""
    return max(float(size), width * 0.84 - 2 * panel_padding(size))


def fit_text(prompt: str, width: int, height: int, font_for: FontFor) -> tuple[ImageFont.FreeTypeFont, list[str]]:
    """Largest font size (down to a floor) whose wrapped text fits the panel."""
    max_height = height * 0.42
    smallest, largest = max(12, height // 48), max(12, height // 14)
    # No glyph is narrower than about 0.2 em, so text past this many characters
    # cannot be shown even at the smallest size; wrapping it would only cost time.
    visible = prompt[: int(width * max_height / (0.2 * smallest * 1.35 * smallest))]

    def wrapped(size: int) -> list[str]:
        return wrap_text(visible, text_width(width, size), font_for(size).getlength)

    def fits(size: int) -> bool:
        return len(wrapped(size)) * size * 1.35 <= max_height

    # Fewer lines at smaller sizes: binary search for the largest size that fits.
    low, high = smallest, largest
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    lines = wrapped(low)
    keep = max(1, int(max_height // (low * 1.35)))
    if len(lines) > keep:
        # Too long even at the smallest size: show what fits and mark the cut.
        lines = lines[:keep]
        lines[-1] = lines[-1][: max(0, len(lines[-1]) - 1)] + "…"
    return font_for(low), lines


def _panel(card: Image.Image, prompt: str, font_for: FontFor) -> Image.Image:
    width, height = card.size
    font, lines = fit_text(prompt, width, height, font_for)
    line_height = round(font.size * 1.35)
    pad = panel_padding(font.size)
    text_height = line_height * len(lines)
    top = height - round(height * 0.06) - text_height - 2 * pad
    layer = Image.new("RGBA", card.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    box = (round(width * 0.08), top, round(width * 0.92), top + text_height + 2 * pad)
    draw.rounded_rectangle(box, radius=pad, fill=(255, 255, 255, 185))
    for index, line in enumerate(lines):
        draw.text((box[0] + pad, top + pad + index * line_height), line, font=font, fill=(28, 30, 40, 255))
    return Image.alpha_composite(card, layer)


@functools.lru_cache(maxsize=32)
def card_font(size: int) -> ImageFont.FreeTypeFont:
    """The committed Noto Sans SC subset at `size` pixels, laid out with the BASIC engine."""
    return ImageFont.truetype(str(FONT_PATH), size, layout_engine=ImageFont.Layout.BASIC)


def render_card(prompt: str, width: int, height: int, font_for: FontFor = card_font,
                variation: str | None = None) -> Image.Image:
    """Draw the card for `prompt`; a pure function of its arguments. A `variation` (a regeneration's nonce)
    gives the same prompt another look."""
    rng = seeded_rng(prompt if not variation else f"{prompt}\x00{variation}")
    colours = palette(rng)
    card = _background(width, height, colours, rng)
    card = _shapes(card, colours, rng)
    return _panel(card, prompt, font_for).convert("RGB")


def encode_webp(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "WEBP", quality=WEBP_QUALITY, method=4)
    return buffer.getvalue()


def check_prompt(prompt: str) -> str:
    text = prompt.strip() if isinstance(prompt, str) else ""
    if not text:
        raise Permanent("image prompt is empty: give the text the illustration is about")
    if len(text) > MAX_PROMPT_CHARS:
        raise Permanent(f"image prompt has {len(text)} characters; the limit is {MAX_PROMPT_CHARS}")
    return text


class LocalImageProvider(LocalProvider):
    """Offline image provider with a journal (lookup) and armed faults (demo mode).

    State lives under `journal_dir/local-image/`, shared by every process that
    builds this provider on the same directory.
    """

    name = "local-image"
    kind = "image"

    def __init__(self, journal_dir: Path, *, model: str = "local-card-1", size: str = DEFAULT_SIZE) -> None:
        parse_size(size)
        self.model = model
        self.size = size
        self._open_state(journal_dir)

    def __repr__(self) -> str:
        return f"LocalImageProvider(model={self.model!r}, size={self.size!r})"

    def _make(self, request: GenerateRequest) -> Result:
        prompt = check_prompt(request.text)
        width, height = parse_size(request.params.get("size") or self.size)
        started = time.perf_counter()
        data = encode_webp(render_card(prompt, width, height, variation=request.params.get("variation")))
        metadata = {
            "width": width, "height": height, "model": self.model,
            "render_ms": round((time.perf_counter() - started) * 1000, 1),
        }
        return Result(data, "image/webp", f"local-image-{uuid.uuid4().hex}", metadata)
