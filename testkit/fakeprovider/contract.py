"""What the real OpenAI API refuses, so the fake refuses it too.

Each rule cites the OpenAI API reference (developers.openai.com/api/reference):
"Create image" (`POST /images/generations`) and "Create speech"
(`POST /audio/speech`). A refusal comes back in the API's error shape:
`{"error": {"message", "type", "param", "code"}}`. The fake checks a request
against these rules before it does (and charges) anything, so an adapter that
drifts from the contract fails in tests the way it would fail against the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# "Create image", body parameters: the whole list of fields the endpoint knows.
IMAGE_FIELDS = frozenset({
    "prompt", "model", "n", "size", "quality", "response_format", "output_format", "output_compression",
    "background", "moderation", "style", "user", "stream", "partial_images",
})
# "Create image" -> model: the GPT image models and the two DALL-E models.
GPT_IMAGE_MODELS = frozenset({
    "gpt-image-1", "gpt-image-1-mini", "gpt-image-1.5", "gpt-image-2", "gpt-image-2-2026-04-21",
    "chatgpt-image-latest",
})
DALLE_MODELS = frozenset({"dall-e-2", "dall-e-3"})
# "Create image" -> size: the sizes each family accepts.
IMAGE_SIZES = {
    "gpt-image": frozenset({"1024x1024", "1536x1024", "1024x1536", "auto"}),
    "dall-e-2": frozenset({"256x256", "512x512", "1024x1024"}),
    "dall-e-3": frozenset({"1024x1024", "1792x1024", "1024x1792"}),
}
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
QUALITIES = {
    "gpt-image": frozenset({"low", "medium", "high", "auto"}),
    "dall-e-2": frozenset({"standard", "auto"}),
    "dall-e-3": frozenset({"standard", "hd", "auto"}),
}

# "Create speech", body parameters.
SPEECH_FIELDS = frozenset({"model", "input", "voice", "instructions", "response_format", "speed", "stream_format"})
# "Create speech" -> model.
SPEECH_MODELS = frozenset({"tts-1", "tts-1-hd", "gpt-4o-mini-tts", "gpt-4o-mini-tts-2025-12-15"})
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


def refuse_image(body: Any) -> Refusal | None:
    """The rules of "Create image" that our adapter can break."""
    if not isinstance(body, dict):
        return error(400, "We could not parse the JSON body of your request.")
    refusal = _unknown(body, IMAGE_FIELDS) or _required(body, ("model", "prompt"))
    if refusal:
        return refusal
    model = body["model"]
    if model not in GPT_IMAGE_MODELS | DALLE_MODELS:
        return _invalid("model", model, GPT_IMAGE_MODELS | DALLE_MODELS)
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
    if "size" in body and body["size"] not in IMAGE_SIZES[family]:
        return _invalid("size", body["size"], IMAGE_SIZES[family])
    if "quality" in body and body["quality"] not in QUALITIES[family]:
        return _invalid("quality", body["quality"], QUALITIES[family])
    for name, allowed in IMAGE_CHOICES.items():
        if name in body and body[name] not in allowed:
            return _invalid(name, body[name], allowed)
    n = body.get("n", 1)
    # "n: Must be between 1 and 10. For dall-e-3, only n=1 is supported."
    if not isinstance(n, int) or not 1 <= n <= (1 if family == "dall-e-3" else 10):
        return error(400, f"Invalid 'n': {n!r}.", param="n", code="invalid_value")
    return None


def refuse_speech(body: Any) -> Refusal | None:
    """The rules of "Create speech" that our adapter can break."""
    if not isinstance(body, dict):
        return error(400, "We could not parse the JSON body of your request.")
    refusal = _unknown(body, SPEECH_FIELDS) or _required(body, ("model", "input", "voice"))
    if refusal:
        return refusal
    if body["model"] not in SPEECH_MODELS:
        return _invalid("model", body["model"], SPEECH_MODELS)
    if body["voice"] not in VOICES:
        return _invalid("voice", body["voice"], VOICES)
    if "response_format" in body and body["response_format"] not in SPEECH_FORMATS:
        return _invalid("response_format", body["response_format"], SPEECH_FORMATS)
    if len(body["input"]) > INPUT_LIMIT:
        return error(400, f"Invalid 'input': string too long. Expected a string with maximum length {INPUT_LIMIT}.",
                     param="input", code="string_above_max_length")
    # "instructions: ... Does not work with tts-1 or tts-1-hd."
    if "instructions" in body and body["model"] in ("tts-1", "tts-1-hd"):
        return error(400, f"instructions are not supported with the model {body['model']}.",
                     param="instructions", code="unsupported_parameter")
    return None


def refuse(endpoint: str, headers: Mapping[str, str], body: Any) -> Refusal | None:
    """The API's refusal of this call (`endpoint` "image" or "audio"), or None when it would do the work."""
    return refuse_auth(headers) or (refuse_image(body) if endpoint == "image" else refuse_speech(body))
