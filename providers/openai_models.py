"""OpenAI's image and speech models as they are today: live or shut down, what each takes, what each costs.

The one catalogue of the provider's models. The adapters (`openai_http`) read which options a model takes, the
price estimate and the ledger (`pipeline.core.prices`) read the prices, the settings check reads the status,
sizes and limits, and the strict fake provider (testkit/fakeprovider) refuses what this says the API refuses.
docs/providers.md prints it.

Every row cites the page it was read from and the day (`READ_ON`, unless the row says otherwise). To update it:
read the deprecations page and each model's page, change the rows, the dates and `READ_ON`, and run
`bin/test tests/unit/test_openai_models.py`, which checks that every live model has a price and every shut-down
model a named replacement that is itself live.

Pages (developers.openai.com, read on 2026-12-06):
  DEPRECATIONS = /api/docs/deprecations            shut-down dates and recommended replacements
  IMAGE_REFERENCE = /api/reference/resources/images/methods/generate   models, sizes, qualities, formats
  TTS_GUIDE = /api/docs/guides/text-to-speech      speech models and their own shutdown notice
  /api/docs/models/<model>                         each model's prices and limits
This module imports nothing and does no I/O.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date

READ_ON = "2026-12-06"
SITE = "https://developers.openai.com"
DEPRECATIONS = f"{SITE}/api/docs/deprecations"
IMAGE_REFERENCE = f"{SITE}/api/reference/resources/images/methods/generate"
TTS_GUIDE = f"{SITE}/api/docs/guides/text-to-speech"
BATCH_DISCOUNT = 0.5       # the Batch API page: "50% discount" on synchronous prices
# quality "auto" lets the provider choose: an estimate assumes the dearest, so a budget errs on the side of less
AUTO_QUALITY = "high"


def page(model: str) -> str:
    return f"{SITE}/api/docs/models/{model}"


@dataclass(frozen=True)
class TokenPrices:
    """Dollars per 1M tokens of an image model's `usage`: text and image in, text and image out."""

    text_input: float
    image_input: float
    text_output: float
    image_output: float


@dataclass(frozen=True)
class ImageModel:
    name: str
    source: str                                  # the page its facts were read from
    shut_down: date | None = None                # the day the API stopped serving it (the deprecations page)
    replacement: str | None = None               # what OpenAI names instead
    snapshots: tuple[str, ...] = ()              # dated names served as this model
    family: str = "gpt-image"                    # "gpt-image" or "dall-e": which request fields it takes
    # sizes: "free" (any WxH within SIZE_RULE) or the listed ones; "auto" is always the provider's choice
    sizes: tuple[str, ...] | str = ("1024x1024", "1536x1024", "1024x1536")
    qualities: tuple[str, ...] = ("low", "medium", "high", "auto")
    output_formats: tuple[str, ...] = ("png", "jpeg", "webp")
    backgrounds: tuple[str, ...] = ("transparent", "opaque", "auto")
    prompt_limit: int = 32_000                   # characters
    per_image: dict[tuple[str, str], float] = field(default_factory=dict)   # (quality, size) -> dollars
    per_image_at_1024: dict[str, float] = field(default_factory=dict)        # quality -> dollars, scaled by area
    per_image_source: str = ""                   # where the per-image figures come from, when not `source`
    tokens: TokenPrices | None = None            # after the call, from `usage`
    default_quality: str = "auto"


@dataclass(frozen=True)
class SpeechModel:
    name: str
    source: str
    shut_down: date | None = None
    replacement: str | None = None
    replacement_note: str = ""
    snapshots: tuple[str, ...] = ()
    instructions: bool = False                   # takes `instructions` ("does not work with tts-1 or tts-1-hd")
    input_chars: int = 4096                      # "Create speech" -> input: "The maximum length is 4096 characters."
    input_tokens: int | None = None              # the model page's own limit, where it states one
    per_million_chars: float | None = None
    per_minute: float | None = None              # OpenAI's pricing page estimate, for token-priced speech
    per_minute_source: str = ""


# "Create image" -> size, for the gpt-image-2 family: any WIDTHxHEIGHT whose sides are multiples of 16, the
# long side at most three times the short one, at most 3840x2160 in pixels and 3840 on an edge (IMAGE_REFERENCE).
# The least area, 655,360 pixels, is not on OpenAI's pages as read: it is what the API answered others
# (third-party reports of the same figure), so the check refuses less than it and says so.
SIZE_STEP, MAX_EDGE, MAX_PIXELS, MIN_PIXELS, MAX_RATIO = 16, 3840, 3840 * 2160, 655_360, 3
# gpt-image-2's per-image figures at 1024x1024 by quality: OpenAI's own cost calculator
# ({SITE}/api/docs/guides/image-generation#size-and-quality-options), quoted on community.openai.com, as 2026-12-06
# shows no per-image table for the family on the model pages. Another size is priced by its area, never below
# 1024x1024 (the calculator bills larger images fewer tokens per pixel, so an estimate by area errs high).
GPT_IMAGE_2_PER_IMAGE = {"low": 0.006, "medium": 0.053, "high": 0.211}
CALCULATOR = f"{SITE}/api/docs/guides/image-generation (its cost calculator, quoted on community.openai.com)"
# The family's model pages list text in $5, image in $8, image out $30 per 1M tokens; they list no price for
# text output tokens, which `usage.output_tokens_details.text_tokens` reports. They are priced at $10, gpt-image-1.5's
# published text output rate, the family's last published figure.
GPT_IMAGE_2_TOKENS = TokenPrices(text_input=5.00, image_input=8.00, text_output=10.00, image_output=30.00)


def _gpt_image_2(name: str, snapshots: tuple[str, ...] = ()) -> ImageModel:
    return ImageModel(name, page(name), snapshots=snapshots, sizes="free", per_image_at_1024=GPT_IMAGE_2_PER_IMAGE,
                      per_image_source=CALCULATOR, tokens=GPT_IMAGE_2_TOKENS)


def _per_image(rows: dict[str, tuple[float, float]]) -> dict[tuple[str, str], float]:
    """quality -> (square, tall or wide) dollars, as the GPT image model pages list them."""
    table = {}
    for quality, (square, tall) in rows.items():
        table.update({(quality, "1024x1024"): square, (quality, "1024x1536"): tall, (quality, "1536x1024"): tall})
    return table


CURRENT_IMAGE = "gpt-image-2.6-sunburst"   # the replacement the deprecations page names for the 2026-12-01 shutdowns
IMAGE_MODELS: dict[str, ImageModel] = {m.name: m for m in (
    _gpt_image_2("gpt-image-2.6-sunburst"),   # released 2026-11-04; its page lists the tokens above
    _gpt_image_2("gpt-image-2.6-flare"),
    _gpt_image_2("gpt-image-2.5-sunburst", ("gpt-image-2.5-sunburst-2026-09-08",)),
    _gpt_image_2("gpt-image-2.5-flare", ("gpt-image-2.5-flare-2026-09-08",)),
    _gpt_image_2("gpt-image-2", ("gpt-image-2-2026-04-21",)),
    # Shut down. Their prices stay: a call made before the shutdown is still settled by them.
    ImageModel("gpt-image-1", page("gpt-image-1"), shut_down=date(2026, 10, 23), replacement="gpt-image-2.5-sunburst",
               per_image=_per_image({"low": (0.011, 0.016), "medium": (0.042, 0.063), "high": (0.167, 0.25)}),
               tokens=TokenPrices(5.00, 10.00, 40.00, 40.00)),
    ImageModel("gpt-image-1-mini", DEPRECATIONS, shut_down=date(2026, 12, 1), replacement=CURRENT_IMAGE,
               per_image=_per_image({"low": (0.005, 0.006), "medium": (0.011, 0.015), "high": (0.036, 0.052)}),
               tokens=TokenPrices(2.00, 2.50, 8.00, 8.00)),
    ImageModel("gpt-image-1.5", DEPRECATIONS, shut_down=date(2026, 12, 1), replacement=CURRENT_IMAGE,
               snapshots=("gpt-image-1.5-2025-12-16",), tokens=TokenPrices(5.00, 8.00, 10.00, 32.00)),
    ImageModel("chatgpt-image-latest", DEPRECATIONS, shut_down=date(2026, 12, 1), replacement=CURRENT_IMAGE),
    ImageModel("dall-e-3", page("dall-e-3"), shut_down=date(2026, 5, 12), replacement="gpt-image-2.5-sunburst",
               family="dall-e", sizes=("1024x1024", "1792x1024", "1024x1792"), qualities=("standard", "hd"),
               output_formats=(), backgrounds=(), prompt_limit=4000, default_quality="standard",
               per_image={("standard", "1024x1024"): 0.04, ("standard", "1024x1792"): 0.08,
                          ("standard", "1792x1024"): 0.08, ("hd", "1024x1024"): 0.08,
                          ("hd", "1024x1792"): 0.12, ("hd", "1792x1024"): 0.12}),
    ImageModel("dall-e-2", page("dall-e-2"), shut_down=date(2026, 5, 12), replacement="gpt-image-2.5-sunburst",
               family="dall-e", sizes=("256x256", "512x512", "1024x1024"), qualities=("standard",),
               output_formats=(), backgrounds=(), prompt_limit=1000, default_quality="standard",
               per_image={("standard", "256x256"): 0.016, ("standard", "512x512"): 0.018,
                          ("standard", "1024x1024"): 0.02}),
)}

# TTS_GUIDE: "The tts-1, tts-1-hd, and gpt-4o-mini-tts models are deprecated and will shut down on January 6, 2027."
# Their replacement speaks through the Realtime API, not POST /v1/audio/speech, so until then they are what the
# speech endpoint serves; the start-up check names the date.
SPEECH_SHUTDOWN = date(2027, 1, 6)
SPEECH_REPLACEMENT = "gpt-realtime-2.1-mini"
REALTIME_NOTE = "through the Realtime API, which this pipeline does not speak yet"
CURRENT_SPEECH = "gpt-4o-mini-tts"
SPEECH_MODELS: dict[str, SpeechModel] = {m.name: m for m in (
    # its page: at most 2,000 input tokens; $0.60 per 1M text in, $12 per 1M audio out, which the pricing page
    # estimated as $0.015 a minute (read 2026-12-01)
    SpeechModel("gpt-4o-mini-tts", page("gpt-4o-mini-tts"), SPEECH_SHUTDOWN, SPEECH_REPLACEMENT, REALTIME_NOTE,
                snapshots=("gpt-4o-mini-tts-2025-12-15", "gpt-4o-mini-tts-2025-03-20"), instructions=True,
                input_tokens=2000, per_minute=0.015, per_minute_source=f"{SITE}/api/docs/pricing (2026-12-01)"),
    SpeechModel("tts-1", page("tts-1"), SPEECH_SHUTDOWN, SPEECH_REPLACEMENT, REALTIME_NOTE, per_million_chars=15.00),
    SpeechModel("tts-1-hd", page("tts-1-hd"), SPEECH_SHUTDOWN, SPEECH_REPLACEMENT, REALTIME_NOTE,
                per_million_chars=30.00),
)}


def image_model(name: str) -> ImageModel | None:
    """The catalogue's row of an image model or one of its dated snapshots; None for a model it does not know
    (a compatible server's own)."""
    return _find(IMAGE_MODELS, name)


def speech_model(name: str) -> SpeechModel | None:
    return _find(SPEECH_MODELS, name)


def _find(models: dict, name: str):
    if name in models:
        return models[name]
    return next((m for m in models.values() if name in m.snapshots), None)


def is_shut_down(model: ImageModel | SpeechModel, today: date) -> bool:
    return model.shut_down is not None and model.shut_down <= today


def gone_message(setting: str, model: ImageModel | SpeechModel) -> str:
    """What to tell whoever configured a shut-down model: the model, the day, what to use instead."""
    instead = f"; OpenAI names {model.replacement} instead" if model.replacement else ""
    return (f"{setting}={model.name!r}: OpenAI shut this model down on {model.shut_down.isoformat()} "
            f"({DEPRECATIONS}){instead}")


def config_refusal(prefix: str, name: str, size: str, options: dict, today: date) -> str | None:
    """Why a provider's settings (`prefix` IMAGE or TTS) ask for what the model will not take, naming the setting
    and the fix; None when it takes them, or when the model is not in the catalogue (a compatible server's own)."""
    model = image_model(name) if prefix == "IMAGE" else speech_model(name)
    if model is None:
        return None
    if is_shut_down(model, today):
        return gone_message(f"{prefix}_MODEL", model) + f"; set {prefix}_MODEL to a live model"
    if isinstance(model, SpeechModel):
        if options.get("instructions") and not model.instructions:
            return f"TTS_INSTRUCTIONS: {model.name} does not take instructions; unset it, or choose {CURRENT_SPEECH}"
        return None
    why = size_refusal(model, size)
    if why:
        return f"IMAGE_SIZE={size!r} is not taken by IMAGE_MODEL={model.name!r}: {why}"
    for option, allowed in (("quality", model.qualities), ("output_format", model.output_formats),
                            ("background", model.backgrounds)):
        if option in options and options[option] not in allowed:
            return (f"IMAGE_{option.upper()}={options[option]!r} is not taken by {model.name}; expected one of: "
                    f"{', '.join(allowed) or '(none: unset it)'}")
    if options.get("background") == "transparent" and options.get("output_format", "png") == "jpeg":
        return "IMAGE_BACKGROUND=transparent needs IMAGE_OUTPUT_FORMAT png or webp (a JPEG has no transparency)"
    return None


_SIZE = re.compile(r"^([1-9][0-9]{1,4})x([1-9][0-9]{1,4})$")


def size_refusal(model: ImageModel, size: str) -> str | None:
    """Why `model` would refuse `size`, or None when it takes it."""
    if size == "auto":
        return None
    if model.sizes != "free":
        return None if size in model.sizes else f"{model.name} takes the sizes {', '.join(model.sizes)} or auto"
    match = _SIZE.match(size)
    if not match:
        return f"{size!r} is not WIDTHxHEIGHT (such as 1536x1024) or auto"
    width, height = int(match[1]), int(match[2])
    if width % SIZE_STEP or height % SIZE_STEP:
        return f"{model.name} takes sides that are multiples of {SIZE_STEP} pixels ({size} is not)"
    if max(width, height) > MAX_EDGE or width * height > MAX_PIXELS:
        return f"{model.name} takes at most 3840x2160 pixels and {MAX_EDGE} on an edge ({size} is larger)"
    if width * height < MIN_PIXELS:
        return f"{model.name} takes at least {MIN_PIXELS:,} pixels, such as 1024x640 ({size} is smaller)"
    if max(width, height) > MAX_RATIO * min(width, height):
        return f"{model.name} takes a long side at most {MAX_RATIO} times the short one ({size} is not)"
    return None


def per_image(model: ImageModel, quality: str | None, size: str) -> float:
    """Dollars for one image at `quality` (None: the model's default) and `size`, before the call: the listed
    figure, else the 1024x1024 figure scaled by area (never below it), else the model's dearest image."""
    wanted = quality or model.default_quality
    wanted = AUTO_QUALITY if wanted == "auto" else wanted
    if (wanted, size) in model.per_image:
        return model.per_image[(wanted, size)]
    at_1024 = model.per_image_at_1024.get(wanted) or max(model.per_image_at_1024.values(), default=0.0)
    if at_1024:
        match = _SIZE.match(size)
        area = int(match[1]) * int(match[2]) if match else MAX_PIXELS   # auto: the provider may choose any size
        return round(at_1024 * max(1.0, area / (1024 * 1024)), 6)
    return max(model.per_image.values(), default=0.0)


def usage_cost(model: ImageModel, usage: dict) -> float | None:
    """Dollars for the tokens an image answer's `usage` reports; None when it reports nothing we can price.

    `usage`: input_tokens with input_tokens_details {text_tokens, image_tokens}; output_tokens with
    output_tokens_details {text_tokens, image_tokens} (an answer without the output details is all image)."""
    if model.tokens is None:
        return None
    try:
        given = usage.get("input_tokens_details") or {}
        text_in = int(given.get("text_tokens", usage.get("input_tokens", 0)))
        image_in = int(given.get("image_tokens", 0))
        made = usage.get("output_tokens_details") or {}
        out = int(usage["output_tokens"])
        text_out = int(made.get("text_tokens", 0))
        image_out = int(made.get("image_tokens", out - text_out))
    except (AttributeError, KeyError, TypeError, ValueError):
        return None
    if min(text_in, image_in, text_out, image_out) < 0:
        return None
    p = model.tokens
    return (text_in * p.text_input + image_in * p.image_input + text_out * p.text_output
            + image_out * p.image_output) / 1_000_000


_RUNS = re.compile(r"[A-Za-z]+|[0-9]+|\s+|.", re.S)


def speech_tokens_at_most(text: str) -> int:
    """An upper estimate of the tokens `text` costs a speech model, without its tokenizer (which is not shipped):
    a character outside ASCII as two tokens (a common Chinese character is one, a rare one up to three), ASCII
    punctuation as one each, and a run of ASCII letters, of digits or of spaces as one token per two characters,
    at least one (English averages about four characters a token). It errs high on the texts lessons hold,
    so that a block we accept is not refused by the provider after its save; `tests/unit/test_openai_models.py` holds it against texts."""
    return sum(math.ceil(len(run) / 2) if len(run) > 1 or run.isascii() and run.isalnum() or run.isspace()
               else 2 if not run.isascii() else 1 for run in _RUNS.findall(text))


def speech_limit_refusal(model: SpeechModel, text: str) -> str | None:
    """Why `model` would refuse `text` as too long, or None."""
    if len(text) > model.input_chars:
        return f"{len(text)} characters; {model.name} takes at most {model.input_chars}"
    if model.input_tokens is not None and speech_tokens_at_most(text) > model.input_tokens:
        return (f"about {speech_tokens_at_most(text)} tokens ({len(text)} characters); {model.name} takes at most "
                f"{model.input_tokens} tokens")
    return None
