"""What the real OpenAI API refuses, so the fake refuses it too.

Each rule cites the OpenAI API reference (developers.openai.com/api/reference):
"Create image" (`POST /images/generations`) and "Create speech"
(`POST /audio/speech`). A refusal comes back in the API's error shape:
`{"error": {"message", "type", "param", "code"}}`. The fake checks a request
against these rules before it does (and charges) anything, so an adapter that
drifts from the contract fails in tests the way it would fail against the API.

Which models exist, which are shut down, which sizes each takes and its input limits are the model catalogue's
(providers/openai_models.py, every row citing its page and the day it was read, 2026-12-06): a model past its
shutdown date is answered 404 `model_not_found`, as the API answers it (the deprecations page: a shut-down model
"will no longer be accessible"; the 404 body is the one the API gives any model it does not serve).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import date, datetime, timezone
from typing import Any

from providers import openai_models as catalogue

# "Create image", body parameters: the whole list of fields the endpoint knows.
IMAGE_FIELDS = frozenset({
    "prompt", "model", "n", "size", "quality", "response_format", "output_format", "output_compression",
    "background", "moderation", "style", "user", "stream", "partial_images",
})
# "Create image" -> model: every name of every image model the catalogue knows (dated snapshots too).
def _names(models) -> frozenset:
    return frozenset(name for m in models for name in (m.name, *m.snapshots))


GPT_IMAGE_MODELS = _names(m for m in catalogue.IMAGE_MODELS.values() if m.family == "gpt-image")
DALLE_MODELS = _names(m for m in catalogue.IMAGE_MODELS.values() if m.family == "dall-e")
# "Create image" -> prompt: 32000 characters for the GPT image models, 1000 for dall-e-2, 4000 for dall-e-3.
PROMPT_LIMITS = {"gpt-image": 32000, "dall-e-2": 1000, "dall-e-3": 4000}
# "Create image": background, output_format, output_compression, moderation and the GPT qualities
# are "only supported for the GPT image models"; response_format is "not supported for the GPT
# image models, which always return base64-encoded images".
GPT_IMAGE_ONLY = frozenset({"background", "output_format", "output_compression", "moderation", "partial_images"})
IMAGE_CHOICES = {
    "output_format": frozenset({"png", "jpeg", "webp"}),
    "background": frozenset({"transparent", "opaque", "auto"}),
    "response_format": frozenset({"url", "b64_json"}),
}

# "Create speech", body parameters.
SPEECH_FIELDS = frozenset({"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"})
# "Create speech" -> model.
SPEECH_MODELS = _names(catalogue.SPEECH_MODELS.values())
# "Create speech" -> voice: the built-in voices.
VOICES = frozenset({"alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer",
                    "verse", "marin", "cedar"})
# "Create speech" -> response_format.
SPEECH_FORMATS = frozenset({"mp3", "opus", "aac", "flac", "wav", "pcm"})
# "Create speech" -> input: "The maximum length is 4096 characters."
INPUT_LIMIT = 4096

Refusal = tuple[int, dict]


def error(status: int, message: str, *, param: str | None = None, code: str | None = None,
          kind: str = "invalid_request_error") -> Refusal:
    """A refusal in the API's error shape."""
    return status, {"error": {"message": message, "type": kind, "param": param, "code": code}}


def refuse_path(method: str, path: str) -> Refusal:
    """What the API answers a path it does not serve (such as /v1/v1/images/generations)."""
    return error(404, f"Invalid URL ({method} {path})")


def refuse_auth(headers: Mapping[str, str]) -> Refusal | None:
    """Authentication: every call carries `Authorization: Bearer <key>`."""
    value = str(headers.get("Authorization", ""))
    if not value.startswith("Bearer ") or not value[7:].strip():
        return error(401, "You didn't provide an API key. You need to provide your API key in an "
                          "Authorization header using Bearer auth (i.e. Authorization: Bearer YOUR_KEY).")
    return None


def _unknown(body: dict, known: frozenset) -> Refusal | None:
    for name in body:
        if name not in known:
            return error(400, f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    return None


def _required(body: dict, names: tuple[str, ...]) -> Refusal | None:
    for name in names:
        if not isinstance(body.get(name), str) or not body[name]:
            return error(400, f"Missing required parameter: '{name}'.", param=name, code="missing_required_parameter")
    return None


def _invalid(param: str, value: Any, allowed: frozenset) -> Refusal:
    choices = ", ".join(f"'{v}'" for v in sorted(allowed))
    return error(400, f"Invalid value: '{value}'. Supported values are: {choices}.", param=param,
                 code="invalid_value")


def image_family(model: str) -> str:
    return "gpt-image" if model in GPT_IMAGE_MODELS else model


def refuse_gone(model: str, today: date | None) -> Refusal | None:
    """A model past its shutdown date on `today` (None: the real UTC date): 404 `model_not_found`."""
    row = catalogue.image_model(model) or catalogue.speech_model(model)
    if row is not None and catalogue.is_shut_down(row, today or datetime.now(timezone.utc).date()):
        return error(404, f"The model `{model}` does not exist or you do not have access to it.",
                     code="model_not_found")
    return None


# gpt-4o-mini-tts's page: "2,000 input tokens". The fake counts tokens its own way, as a byte-pair tokenizer
# splits text before it merges (a word with its leading space is a token per four characters, up to three digits
# a token, a run of spaces a token, any other character a token), not with the pipeline's estimate, so a test
# sees whether that estimate keeps a save from reaching a refusal here.
_PIECES = re.compile(r" ?[A-Za-z]+| ?[0-9]{1,3}|\s+|.", re.S)


def speech_tokens(text: str) -> int:
    return sum(-(-len(p) // 4) if p.strip().isalpha() and p.isascii() else 1 for p in _PIECES.findall(text))


def refuse_image(body: Any, today: date | None = None) -> Refusal | None:
    """The rules of "Create image" that our adapter can break."""
    if not isinstance(body, dict):
        return error(400, "We could not parse the JSON body of your request.")
    refusal = _unknown(body, IMAGE_FIELDS) or _required(body, ("model", "prompt"))
    if refusal:
        return refusal
    model = body["model"]
    if model not in GPT_IMAGE_MODELS | DALLE_MODELS:
        return _invalid("model", model, GPT_IMAGE_MODELS | DALLE_MODELS)
    gone = refuse_gone(model, today)
    if gone:
        return gone
    family = image_family(model)
    if family == "gpt-image" and "response_format" in body:
        return error(400, "Unknown parameter: 'response_format'.", param="response_format", code="unknown_parameter")
    if family != "gpt-image":
        for name in GPT_IMAGE_ONLY & body.keys():
            return error(400, f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
    if len(body["prompt"]) > PROMPT_LIMITS[family]:
        return error(400, f"Invalid 'prompt': string too long. Expected a string with maximum length "
                          f"{PROMPT_LIMITS[family]}.", param="prompt", code="string_above_max_length")
    return _refuse_image_values(body, family)


def _refuse_image_values(body: dict, family: str) -> Refusal | None:
    row = catalogue.image_model(body["model"])
    # "Create image" -> size: the listed sizes, or for the gpt-image-2 family any WIDTHxHEIGHT within its limits
    why = catalogue.size_refusal(row, body["size"]) if "size" in body and isinstance(body["size"], str) else None
    if why or ("size" in body and not isinstance(body["size"], str)):
        return error(400, f"Invalid value: '{body['size']}'. {why or 'Expected a string.'}", param="size",
                     code="invalid_value")
    if "quality" in body and body["quality"] not in set(row.qualities) | {"auto"}:
        return _invalid("quality", body["quality"], frozenset(row.qualities) | {"auto"})
    for name, allowed in IMAGE_CHOICES.items():
        if name in body and body[name] not in allowed:
            return _invalid(name, body[name], allowed)
    n = body.get("n", 1)
    # "n: Must be between 1 and 10. For dall-e-3, only n=1 is supported."
    if not isinstance(n, int) or not 1 <= n <= (1 if family == "dall-e-3" else 10):
        return error(400, f"Invalid 'n': {n!r}.", param="n", code="invalid_value")
    return None


def refuse_speech(body: Any, today: date | None = None) -> Refusal | None:
    """The rules of "Create speech" that our adapter can break."""
    if not isinstance(body, dict):
        return error(400, "We could not parse the JSON body of your request.")
    refusal = _unknown(body, SPEECH_FIELDS) or _required(body, ("model", "input", "voice"))
    if refusal:
        return refusal
    if body["model"] not in SPEECH_MODELS:
        return _invalid("model", body["model"], SPEECH_MODELS)
    gone = refuse_gone(body["model"], today)
    if gone:
        return gone
    if body["voice"] not in VOICES:
        return _invalid("voice", body["voice"], VOICES)
    if "response_format" in body and body["response_format"] not in SPEECH_FORMATS:
        return _invalid("response_format", body["response_format"], SPEECH_FORMATS)
    if len(body["input"]) > INPUT_LIMIT:
        return error(400, f"Invalid 'input': string too long. Expected a string with maximum length {INPUT_LIMIT}.",
                     param="input", code="string_above_max_length")
    limit = catalogue.speech_model(body["model"]).input_tokens
    if limit is not None and speech_tokens(body["input"]) > limit:
        return error(400, f"Invalid 'input': {speech_tokens(body['input'])} tokens; {body['model']} takes at most "
                          f"{limit} input tokens.", param="input", code="string_above_max_length")
    # "instructions: ... Does not work with tts-1 or tts-1-hd."
    if "instructions" in body and body["model"] in ("tts-1", "tts-1-hd"):
        return error(400, f"instructions are not supported with the model {body['model']}.",
                     param="instructions", code="unsupported_parameter")
    return None


def refuse(endpoint: str, headers: Mapping[str, str], body: Any, *, today: date | None = None) -> Refusal | None:
    """The API's refusal of this call (`endpoint` "image" or "audio") on `today`, or None when it would do the work."""
    return refuse_auth(headers) or (refuse_image(body, today) if endpoint == "image" else refuse_speech(body, today))
