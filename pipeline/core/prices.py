"""What a provider call costs: the published price table, an estimate before a call, the figure after it. Pure.

Prices are in US dollars, as OpenAI publishes them on each model's page
(developers.openai.com/api/docs/models/<model>), read on PUBLISHED. A GPT image
model is priced per image by quality and size before the call, and its answer
reports `usage` (input text and image tokens, output image tokens), priced per
million tokens after it. Speech is priced per million characters (tts-1, tts-1-hd)
or, for gpt-4o-mini-tts, by OpenAI's own estimate per minute of audio. The Batch
API costs half of either (BATCH_DISCOUNT, "50% discount" on the Batch API page).

A setting (`IMAGE_COST_PER_CALL`, `TTS_COST_PER_CALL`) overrides the table for its
provider; a model the table does not know costs nothing unless the setting says
otherwise, and a budget refuses to start on a cost of 0 (pipeline/settings.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

PUBLISHED = "2026-12-01"
BATCH_DISCOUNT = 0.5
# quality "auto" lets the provider choose: the estimate assumes the dearest, so a budget errs on the side of less
AUTO_QUALITY = "high"


@dataclass(frozen=True)
class ImagePrice:
    per_image: Mapping[tuple[str, str], float]   # (quality, size) -> dollars per image
    text_input: float                             # dollars per 1M input text tokens
    image_input: float                            # dollars per 1M input image tokens
    image_output: float                           # dollars per 1M output image tokens


def _sizes(square: float, tall: float) -> dict[str, float]:
    return {"1024x1024": square, "1024x1536": tall, "1536x1024": tall}


def _per_image(low: tuple[float, float], medium: tuple[float, float], high: tuple[float, float]) -> dict:
    table = {}
    for quality, (square, tall) in (("low", low), ("medium", medium), ("high", high)):
        table.update({(quality, size): price for size, price in _sizes(square, tall).items()})
    return table


IMAGES: dict[str, ImagePrice] = {
    # developers.openai.com/api/docs/models/gpt-image-1
    "gpt-image-1": ImagePrice(_per_image((0.011, 0.016), (0.042, 0.063), (0.167, 0.25)), 5.00, 10.00, 40.00),
    # developers.openai.com/api/docs/models/gpt-image-1-mini
    "gpt-image-1-mini": ImagePrice(_per_image((0.005, 0.006), (0.011, 0.015), (0.036, 0.052)), 2.00, 2.50, 8.00),
    # developers.openai.com/api/docs/models/dall-e-3 and dall-e-2: per image only, no token usage
    "dall-e-3": ImagePrice({("standard", "1024x1024"): 0.04, ("standard", "1024x1792"): 0.08,
                            ("standard", "1792x1024"): 0.08, ("hd", "1024x1024"): 0.08,
                            ("hd", "1024x1792"): 0.12, ("hd", "1792x1024"): 0.12}, 0, 0, 0),
    "dall-e-2": ImagePrice({("standard", "256x256"): 0.016, ("standard", "512x512"): 0.018,
                            ("standard", "1024x1024"): 0.02}, 0, 0, 0),
}
DEFAULT_QUALITY = {"dall-e-3": "standard", "dall-e-2": "standard"}   # the GPT image models default to auto

# Speech: dollars per 1M characters (developers.openai.com/api/docs/models/tts-1 and tts-1-hd)
SPEECH_PER_MILLION_CHARS = {"tts-1": 15.00, "tts-1-hd": 30.00}
# gpt-4o-mini-tts is priced by tokens ($0.60 per 1M text in, $12 per 1M audio out); OpenAI's pricing page
# estimates that as $0.015 per minute of audio. Minutes are estimated from the text before the call
# (SPEECH_CHARS_PER_MINUTE) and read from the audio's duration after it.
SPEECH_PER_MINUTE = {"gpt-4o-mini-tts": 0.015}
SPEECH_CHARS_PER_MINUTE = 750


def _speech_model(model: str) -> str:
    """A dated snapshot (gpt-4o-mini-tts-2025-12-15) is priced as its model."""
    for name in (*SPEECH_PER_MILLION_CHARS, *SPEECH_PER_MINUTE):
        if model == name or model.startswith(name + "-2"):
            return name
    return model


def _image_model(model: str) -> str:
    for name in IMAGES:
        if model == name or model.startswith(name + "-2"):
            return name
    return model


def _discount(cost: float, batch: bool) -> float:
    return round(cost * (BATCH_DISCOUNT if batch else 1.0), 6)


def image_estimate(model: str, size: str, quality: str | None, *, batch: bool = False) -> float | None:
    """Dollars for one image of `model` at `size` and `quality` (None: the model's default); None: not in the table."""
    price = IMAGES.get(_image_model(model))
    if price is None:
        return None
    wanted = quality or DEFAULT_QUALITY.get(_image_model(model), "auto")
    wanted = AUTO_QUALITY if wanted == "auto" else wanted
    cost = price.per_image.get((wanted, size))
    if cost is None:   # a size or quality the table does not list: the dearest image of the model
        cost = max(price.per_image.values())
    return _discount(cost, batch)


def image_reported(model: str, usage: Mapping | None, *, batch: bool = False) -> float | None:
    """Dollars for the tokens an image answer reports in `usage`; None when it reports none we can price."""
    price = IMAGES.get(_image_model(model))
    if price is None or not isinstance(usage, Mapping) or not price.image_output:
        return None
    try:
        details = usage.get("input_tokens_details") or {}
        text = int(details.get("text_tokens", usage.get("input_tokens", 0)))
        image_in = int(details.get("image_tokens", 0))
        out = int(usage["output_tokens"])
    except (KeyError, TypeError, ValueError):
        return None
    cost = (text * price.text_input + image_in * price.image_input + out * price.image_output) / 1_000_000
    return _discount(cost, batch)


def speech_estimate(model: str, chars: int, *, batch: bool = False) -> float | None:
    """Dollars to speak `chars` characters with `model`; None: not in the table."""
    name = _speech_model(model)
    if name in SPEECH_PER_MILLION_CHARS:
        return _discount(chars * SPEECH_PER_MILLION_CHARS[name] / 1_000_000, batch)
    if name in SPEECH_PER_MINUTE:
        return _discount(chars / SPEECH_CHARS_PER_MINUTE * SPEECH_PER_MINUTE[name], batch)
    return None


def speech_reported(model: str, chars: int, duration_ms: int | None) -> float | None:
    """Dollars for the speech a call returned: by characters, or by the audio's minutes where priced so."""
    name = _speech_model(model)
    if name in SPEECH_PER_MILLION_CHARS:
        return speech_estimate(name, chars)
    if name in SPEECH_PER_MINUTE and duration_ms:
        return round(duration_ms / 60_000 * SPEECH_PER_MINUTE[name], 6)
    return None


class Priced(Protocol):
    """How a provider's calls are priced (its settings, pipeline.settings.ProviderSettings)."""

    priced_by: str          # "table": by this module's table; otherwise by cost_per_call
    cost_per_call: float
    model: str
    size: str
    options: tuple


def estimate(p: Priced, kind: str, data: dict, *, batch: bool = False) -> float:
    """What one call for a task's input `data` is booked at: *_COST_PER_CALL when set (half of it for a batch
    line), else the price table's figure for the input's model, size and quality (speech: its length)."""
    if p.priced_by != "table":
        return round(p.cost_per_call * (BATCH_DISCOUNT if batch else 1.0), 6)
    model = data.get("model") or p.model
    if kind == "image":
        quality = (data.get("options") or {}).get("quality") or dict(p.options).get("quality")
        cost = image_estimate(model, data.get("size") or p.size, quality, batch=batch)
    else:
        cost = speech_estimate(model, len(data.get("text", "")), batch=batch)
    return p.cost_per_call if cost is None else cost


def reported(p: Priced, kind: str, data: dict, metadata: dict, *, batch: bool = False) -> float | None:
    """What the provider's answer says the call cost, priced by the table (None: it says nothing we can price,
    or the cost is set by *_COST_PER_CALL)."""
    if p.priced_by != "table":
        return None
    model = data.get("model") or p.model
    if kind == "image":
        return image_reported(model, metadata.get("usage"), batch=batch)
    return speech_reported(model, len(data.get("text", "")), metadata.get("duration_ms"))
