"""HTTP adapters for OpenAI and OpenAI-compatible image and speech endpoints.

This module owns the wire format of `POST /v1/images/generations` and
`POST /v1/audio/speech`: which fields each model family takes, and how an
answer becomes a `Result`. The transport (limits, headers, classification)
is `http_endpoint`'s.

The payloads follow the OpenAI API reference (developers.openai.com/api/reference,
"Create image" and "Create speech"):

* GPT image models (`gpt-image-*`, `chatgpt-image-*`) always answer base64 and
  refuse `response_format` ("Unknown parameter"); they take `quality`
  (low/medium/high/auto), `output_format` (png/jpeg/webp) and `background`.
* `dall-e-2` / `dall-e-3` answer a URL unless `response_format: b64_json`; they
  take none of the GPT image options.
* Speech models take `model`, `input`, `voice`, `response_format`;
  `instructions` "does not work with tts-1 or tts-1-hd", so only
  `gpt-4o-mini-tts*` gets it.
* A model of another family (a self-hosted compatible server's) gets the
  minimal payload: model, prompt/input, size/voice, n, and for speech the
  response format.
"""

from __future__ import annotations

import base64
import io
import wave
from collections.abc import Mapping
from typing import Any

import requests

from .base import GenerateRequest, LookupAnswer, Result, Unsupported
from .errors import Permanent, ProviderConfigError
from .http_classify import BadBody
from .http_endpoint import Answer, HttpEndpoint, Limits

AUDIO_TYPES = {
    "mp3": "audio/mpeg", "wav": "audio/wav", "opus": "audio/ogg", "aac": "audio/aac",
    "flac": "audio/flac", "pcm": "audio/L16",
}
GPT_IMAGE_OPTIONS = ("quality", "output_format", "background")


def image_family(model: str) -> str:
    """'gpt-image', 'dall-e' or 'other' (a compatible server's own model)."""
    if model.startswith(("gpt-image-", "chatgpt-image-")):
        return "gpt-image"
    if model in ("dall-e-2", "dall-e-3"):
        return "dall-e"
    return "other"


def image_payload(model: str, prompt: str, size: str, options: Mapping[str, str]) -> dict:
    """The JSON body of one image call for `model`'s family."""
    payload: dict[str, Any] = {"model": model, "prompt": prompt, "n": 1}
    if size:
        payload["size"] = size
    family = image_family(model)
    if family == "gpt-image":
        payload.update({k: options[k] for k in GPT_IMAGE_OPTIONS if options.get(k)})
    elif family == "dall-e":
        payload["response_format"] = "b64_json"
    return payload


def speech_payload(model: str, text: str, voice: str, response_format: str, options: Mapping[str, str]) -> dict:
    """The JSON body of one speech call; `instructions` only for the models that take it."""
    payload = {"model": model, "input": text, "voice": voice, "response_format": response_format}
    if options.get("instructions") and model.startswith("gpt-4o-mini-tts"):
        payload["instructions"] = options["instructions"]
    return payload


def sniff_image_type(data: bytes) -> str:
    """Media type from magic bytes: PNG, WebP or JPEG; BadBody otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    raise BadBody(f"image bytes are not PNG, WebP or JPEG (start {data[:8]!r})")


def _check_request(request: GenerateRequest, kind: str, provider: str) -> None:
    if request.kind != kind:
        raise Permanent(f"{provider} makes {kind!r}, not {request.kind!r}")
    if not request.text.strip():
        raise Permanent(f"{provider}: the text is empty; give the text to turn into {kind}")
    if not request.idempotency_key:
        raise Permanent(f"{provider}: an idempotency key is required on every call")


class OpenAIImageProvider:
    """`POST {root}/v1/images/generations`, one image as base64."""

    name = "openai-image"
    supports_lookup = False

    def __init__(self, *, base_url: str, api_key: str, model: str, session: requests.Session,
                 limits: Limits, size: str = "1024x1024", options: Mapping[str, str] | None = None,
                 honours_idempotency_key: bool = False) -> None:
        self._http = HttpEndpoint(base_url, api_key, session, limits)
        self.model = model
        self.size = size
        self.options = dict(options or {})
        self.honours_idempotency_key = honours_idempotency_key

    def __repr__(self) -> str:
        return f"OpenAIImageProvider(base_url={self._http.base_url!r}, model={self.model!r}, size={self.size!r})"

    def generate(self, request: GenerateRequest) -> Result:
        _check_request(request, "image", self.name)
        params = request.params
        model = params.get("model") or self.model
        payload = image_payload(model, request.text, params.get("size") or self.size,
                                params.get("options") or self.options)
        return self._http.post("/v1/images/generations", payload, request.idempotency_key,
                               lambda answer: _parse_image(answer, model), request.seconds_left)

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        return Unsupported()  # the API cannot be asked what happened to a key


def _parse_image(answer: Answer, model: str) -> Result:
    body = answer.json()
    try:
        encoded = body["data"][0]["b64_json"]
    except (KeyError, IndexError, TypeError) as exc:
        raise BadBody(f"no data[0].b64_json in the answer ({type(exc).__name__})") from exc
    if not isinstance(encoded, str):
        raise BadBody("data[0].b64_json is not a string")
    data = base64.b64decode(encoded, validate=True)
    media_type = sniff_image_type(data)
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else None   # GPT image models report tokens
    return Result(data, media_type, answer.request_id,
                  {"model": model, **_image_size(data), **({"usage": usage} if usage else {})})


def _image_size(data: bytes) -> dict:
    from PIL import Image, UnidentifiedImageError  # only the header is read

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError) as exc:
        raise BadBody(f"image header unreadable: {exc}") from exc
    return {"width": width, "height": height}


class OpenAISpeechProvider:
    """`POST {root}/v1/audio/speech`; the answer body is the audio."""

    name = "openai-tts"
    supports_lookup = False

    def __init__(self, *, base_url: str, api_key: str, model: str, session: requests.Session,
                 limits: Limits, voice: str = "alloy", response_format: str = "wav",
                 options: Mapping[str, str] | None = None, honours_idempotency_key: bool = False) -> None:
        if response_format not in AUDIO_TYPES:
            raise ProviderConfigError(f"response_format {response_format!r}: choose one of {', '.join(AUDIO_TYPES)}")
        self._http = HttpEndpoint(base_url, api_key, session, limits)
        self.model = model
        self.voice = voice
        self.response_format = response_format
        self.options = dict(options or {})
        self.honours_idempotency_key = honours_idempotency_key

    def __repr__(self) -> str:
        return f"OpenAISpeechProvider(base_url={self._http.base_url!r}, model={self.model!r}, voice={self.voice!r})"

    def generate(self, request: GenerateRequest) -> Result:
        _check_request(request, "audio", self.name)
        params = request.params
        model = params.get("model") or self.model
        payload = speech_payload(model, request.text, params.get("voice") or self.voice, self.response_format,
                                 params.get("options") or self.options)
        return self._http.post("/v1/audio/speech", payload, request.idempotency_key,
                               lambda answer: self._parse(answer, model), request.seconds_left)

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        return Unsupported()  # the API cannot be asked what happened to a key

    def _parse(self, answer: Answer, model: str) -> Result:
        if not answer.body:
            raise BadBody("the audio answer is empty")
        metadata: dict[str, Any] = {"model": model, "format": self.response_format}
        if self.response_format == "wav":
            metadata.update(_wav_info(answer.body))
        return Result(answer.body, AUDIO_TYPES[self.response_format], answer.request_id, metadata)


def _wav_info(data: bytes) -> dict:
    try:
        with wave.open(io.BytesIO(data), "rb") as audio:
            rate, frames = audio.getframerate(), audio.getnframes()
    except (wave.Error, EOFError) as exc:
        raise BadBody(f"the WAV answer is unreadable: {exc}") from exc
    return {"sample_rate": rate, "duration_ms": round(frames * 1000 / rate) if rate else 0}
