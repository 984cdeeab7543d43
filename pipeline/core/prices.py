"""What a provider call costs: an estimate before a call, the figure after it, from the model catalogue. Pure.

Prices are in US dollars, as OpenAI publishes them, kept with every other fact about a model in one catalogue
(providers/openai_models.py, each row citing its page and the day it was read). A GPT image model is priced per
image by quality and size before the call, and its answer reports `usage` (text and image tokens in, text and
image tokens out), priced per million tokens after it. Speech is priced per million characters (tts-1, tts-1-hd)
or, for gpt-4o-mini-tts, by OpenAI's own estimate per minute of audio. The Batch API costs half of either.

A setting (`IMAGE_COST_PER_CALL`, `TTS_COST_PER_CALL`) overrides the catalogue for its provider; a model the
catalogue does not know costs nothing unless the setting says otherwise, and a budget refuses to start on a cost
of 0 (pipeline/settings.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from pipeline.core import kinds
from providers import openai_models as catalogue

PUBLISHED = catalogue.READ_ON
BATCH_DISCOUNT = catalogue.BATCH_DISCOUNT
# Minutes of speech are estimated from the text before the call and read from the audio's duration after it.
SPEECH_CHARS_PER_MINUTE = 750


def _discount(cost: float, batch: bool) -> float:
    return round(cost * (BATCH_DISCOUNT if batch else 1.0), 6)


def image_estimate(model: str, size: str, quality: str | None, *, batch: bool = False) -> float | None:
    """Dollars for one image of `model` at `size` and `quality` (None: the model's default); None: not in the
    catalogue."""
    found = catalogue.image_model(model)
    if found is None or not (found.per_image or found.per_image_at_1024):
        return None
    return _discount(catalogue.per_image(found, quality, size), batch)


def image_reported(model: str, usage: Mapping | None, *, batch: bool = False) -> float | None:
    """Dollars for the tokens an image answer reports in `usage`; None when it reports none we can price."""
    found = catalogue.image_model(model)
    if found is None or not isinstance(usage, Mapping):
        return None
    cost = catalogue.usage_cost(found, usage)
    return None if cost is None else _discount(cost, batch)


def speech_estimate(model: str, chars: int, *, batch: bool = False) -> float | None:
    """Dollars to speak `chars` characters with `model`; None: not in the catalogue."""
    found = catalogue.speech_model(model)
    if found is None:
        return None
    if found.per_million_chars is not None:
        return _discount(chars * found.per_million_chars / 1_000_000, batch)
    if found.per_minute is not None:
        return _discount(chars / SPEECH_CHARS_PER_MINUTE * found.per_minute, batch)
    return None


def speech_reported(model: str, chars: int, duration_ms: int | None) -> float | None:
    """Dollars for the speech a call returned: by characters, or by the audio's minutes where priced so."""
    found = catalogue.speech_model(model)
    if found is None:
        return None
    if found.per_million_chars is not None:
        return speech_estimate(model, chars)
    if found.per_minute is not None and duration_ms:
        return round(duration_ms / 60_000 * found.per_minute, 6)
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
    cost = kinds.get(kind).estimate(p, data, batch)
    return p.cost_per_call if cost is None else cost


def estimator(p: Priced, kind: kinds.Kind) -> Callable[..., float]:
    """`estimate` for one provider and kind, resolved once (a worker's `slots.CallPlan`): (data, batch=False) ->
    dollars, as `estimate` answers."""
    if p.priced_by != "table":
        return lambda data, batch=False: round(p.cost_per_call * (BATCH_DISCOUNT if batch else 1.0), 6)

    def by_table(data: dict, batch: bool = False) -> float:
        cost = kind.estimate(p, data, batch)
        return p.cost_per_call if cost is None else cost
    return by_table


def reported(p: Priced, kind: str, data: dict, metadata: dict, *, batch: bool = False) -> float | None:
    """What the provider's answer says the call cost, priced by the table (None: it says nothing we can price,
    or the cost is set by *_COST_PER_CALL)."""
    if p.priced_by != "table":
        return None
    return kinds.get(kind).reported(p, data, metadata, batch)
