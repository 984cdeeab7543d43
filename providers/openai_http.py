"""HTTP adapters for OpenAI-compatible image and speech endpoints, over `requests`.

This module owns the wire format of `POST /v1/images/generations` and
`POST /v1/audio/speech`, the headers sent on every call (Bearer token,
Idempotency-Key), and the translation of every third-party failure into the
four provider error classes. That translation happens in exactly one
function, `classify`, and it follows one question: could the provider have
executed (and charged) the request?

* provably not sent (connection refused, DNS, TLS handshake, connect
  timeout; 408) -> Transient;
* refused for good (400, 401, 403, 404, 422, other 4xx) -> Permanent;
* rate limited or still in progress (429, 503 with Retry-After; 409, the
  idempotency key's first request is still running) -> Busy;
* anything after the request may have arrived (read timeout, connection
  lost, 5xx, truncated or undecodable body) -> Ambiguous.

The session is injected and a (connect, read) timeout is passed on every
call. The API key never appears in a message or a repr. No database, no
knowledge of tasks.
"""

from __future__ import annotations

import base64
import email.utils
import io
import ssl
import time
import traceback
import wave
from collections.abc import Callable
from typing import Any

import requests
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

from pipeline.errors import Ambiguous, Busy, Permanent, ProviderError, Transient

from .base import GenerateRequest, LookupAnswer, Result, Unsupported

PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})
DEFAULT_RETRY_AFTER = 1.0
# Where ssl errors raised during the handshake (or the hostname check right
# after it) come from: no request byte has been written at that point.
_HANDSHAKE_FRAMES = frozenset({"do_handshake", "_match_hostname", "match_hostname"})
_AUDIO_TYPES = {
    "mp3": "audio/mpeg", "wav": "audio/wav", "opus": "audio/ogg", "aac": "audio/aac",
    "flac": "audio/flac", "pcm": "audio/L16",
}


class BadBody(ValueError):
    """A 2xx answer whose body we cannot use (the provider may still have charged)."""


def sniff_image_type(data: bytes) -> str:
    """Media type from magic bytes: PNG, WebP or JPEG; BadBody otherwise."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    raise BadBody(f"image bytes are not PNG, WebP or JPEG (start {data[:8]!r})")


def parse_retry_after(value: str | None, now: float | None = None) -> float:
    """Retry-After as seconds (delta-seconds or an HTTP date); default 1 when absent or bad."""
    if not value:
        return DEFAULT_RETRY_AFTER
    text = value.strip()
    try:
        return max(0.0, float(text))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(text).timestamp()
    except (TypeError, ValueError, IndexError, OverflowError):
        return DEFAULT_RETRY_AFTER
    return max(0.0, when - (time.time() if now is None else now))


def _provider_message(response: requests.Response) -> str:
    try:
        body = response.json()
        message = body["error"]["message"]
        if isinstance(message, str) and message:
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return (response.text or response.reason or "").strip()[:300]


def _causes(exc: BaseException, limit: int = 8) -> list[BaseException]:
    """`exc` and what it wraps (urllib3 keeps the cause in `.reason` or `args[0]`)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and len(chain) < limit and current not in chain:
        chain.append(current)
        inner = getattr(current, "reason", None)
        if not isinstance(inner, BaseException):
            inner = current.args[0] if current.args and isinstance(current.args[0], BaseException) else None
        current = inner or current.__cause__ or current.__context__
    return chain


def _failed_in_handshake(exc: BaseException) -> bool:
    # requests raises the same SSLError for a failed handshake and for a TLS
    # error while reading the answer; only where the ssl error was raised
    # tells whether request bytes had left. Unknown -> not provably unsent.
    for cause in _causes(exc):
        if isinstance(cause, (ssl.SSLError, ssl.CertificateError)) or type(cause).__name__ == "CertificateError":
            frames = traceback.walk_tb(cause.__traceback__)
            return any(frame.f_code.co_name in _HANDSHAKE_FRAMES for frame, _ in frames)
    return False


def _sent_nothing(exc: requests.RequestException) -> bool:
    """True only when the failure provably happened before the request left us."""
    if isinstance(exc, requests.exceptions.SSLError):
        return _failed_in_handshake(exc)
    if isinstance(exc, (requests.ConnectTimeout, requests.exceptions.ProxyError)):
        return True
    if isinstance(exc, requests.ConnectionError) and exc.args:
        reason = exc.args[0]
        if isinstance(reason, MaxRetryError):
            reason = reason.reason
        # NameResolutionError is a NewConnectionError: DNS failed, nothing sent.
        return isinstance(reason, (NewConnectionError, ConnectTimeoutError))
    return False


def _classify_status(response: requests.Response) -> ProviderError:
    status = response.status_code
    message = f"HTTP {status}: {_provider_message(response)}"
    retry_after = response.headers.get("Retry-After")
    if status == 429 or (status == 503 and retry_after is not None):
        return Busy(message, retry_after=parse_retry_after(retry_after), http_status=status)
    if status == 409:
        # With an idempotency key, 409 means a request with this key is still
        # being processed: its outcome will be known later, so wait.
        return Busy(message, retry_after=parse_retry_after(retry_after), http_status=status)
    if status == 408:
        # The server gave up waiting for our request before it was complete.
        return Transient(message, http_status=status)
    if status in PERMANENT_STATUSES or 400 <= status < 500:
        return Permanent(message, http_status=status)
    return Ambiguous(message, http_status=status)


def classify(exc: BaseException, *, secret: str = "") -> ProviderError:
    """The one translation of a failed call into Permanent/Transient/Ambiguous/Busy.

    `secret` (the API key) is cut out of the message, whatever echoed it.
    """
    error = _classify(exc)
    if secret and secret in str(error):
        error.args = (str(error).replace(secret, "***"),)
    return error


def _classify(exc: BaseException) -> ProviderError:
    if isinstance(exc, requests.HTTPError) and exc.response is not None:
        return _classify_status(exc.response)
    if isinstance(exc, (requests.exceptions.InvalidURL, requests.exceptions.MissingSchema,
                        requests.exceptions.InvalidSchema, requests.exceptions.InvalidHeader)):
        return Permanent(f"request not sent, the endpoint setting is invalid: {exc}")
    if isinstance(exc, requests.RequestException) and _sent_nothing(exc):
        return Transient(f"request not sent: {type(exc).__name__}: {exc}")
    if isinstance(exc, requests.ReadTimeout):
        return Ambiguous(f"no answer within the read timeout: {exc}")
    if isinstance(exc, ValueError):  # BadBody, binascii.Error, JSONDecodeError
        return Ambiguous(f"the answer could not be decoded: {type(exc).__name__}: {exc}")
    # Connection lost after sending, truncated body, anything unknown: the
    # provider may have done the work, so the outcome is unknown.
    return Ambiguous(f"the call failed after the request may have arrived: {type(exc).__name__}: {exc}")


class _HttpEndpoint:
    """A base URL, a secret key and a session: POSTs JSON and classifies failures."""

    def __init__(self, base_url: str, api_key: str, session: requests.Session,
                 timeout: tuple[float, float]) -> None:
        self.base_url = base_url.rstrip("/")
        self._api_key = api_key
        self._session = session
        self.timeout = timeout

    def post(self, path: str, payload: dict, key: str, parse: Callable[[requests.Response], Result]) -> Result:
        """POST `payload`; `parse` turns a 2xx answer into a Result or raises BadBody."""
        headers = {"Authorization": f"Bearer {self._api_key}", "Idempotency-Key": key}
        try:
            response = self._session.post(
                f"{self.base_url}{path}", json=payload, headers=headers,
                timeout=self.timeout, allow_redirects=False,
            )
            if not 200 <= response.status_code < 300:
                raise requests.HTTPError(f"HTTP {response.status_code}", response=response)
            _check_length(response)
            return parse(response)
        except (OSError, ValueError) as exc:  # RequestException is an OSError
            raise classify(exc, secret=self._api_key) from exc


def _check_length(response: requests.Response) -> None:
    declared = response.headers.get("Content-Length")
    # With a Content-Encoding the header counts compressed bytes; skip the check then.
    if declared is None or response.headers.get("Content-Encoding"):
        return
    if not declared.isdigit() or int(declared) != len(response.content):
        raise BadBody(f"body is {len(response.content)} bytes, Content-Length says {declared}")


def _request_id(response: requests.Response) -> str:
    return response.headers.get("x-request-id") or response.headers.get("request-id") or ""


def _check_request(request: GenerateRequest, kind: str, provider: str) -> None:
    if request.kind != kind:
        raise Permanent(f"{provider} makes {kind!r}, not {request.kind!r}")
    if not request.text.strip():
        raise Permanent(f"{provider}: the text is empty; give the text to turn into {kind}")
    if not request.idempotency_key:
        raise Permanent(f"{provider}: an idempotency key is required on every call")


class OpenAIImageProvider:
    """`POST {base}/v1/images/generations`, one image as b64_json."""

    name = "openai-image"
    supports_lookup = False

    def __init__(self, *, base_url: str, api_key: str, model: str, session: requests.Session,
                 timeout: tuple[float, float], size: str = "1024x1024",
                 honours_idempotency_key: bool = False) -> None:
        self._http = _HttpEndpoint(base_url, api_key, session, timeout)
        self.model = model
        self.size = size
        self.honours_idempotency_key = honours_idempotency_key

    def __repr__(self) -> str:
        return f"OpenAIImageProvider(base_url={self._http.base_url!r}, model={self.model!r}, size={self.size!r})"

    def generate(self, request: GenerateRequest) -> Result:
        _check_request(request, "image", self.name)
        payload = {
            "model": request.params.get("model") or self.model, "prompt": request.text,
            "size": request.params.get("size") or self.size, "n": 1, "response_format": "b64_json",
        }
        return self._http.post("/v1/images/generations", payload, request.idempotency_key, self._parse)

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        return Unsupported()  # the API cannot be asked what happened to a key

    def _parse(self, response: requests.Response) -> Result:
        body = response.json()
        try:
            encoded = body["data"][0]["b64_json"]
        except (KeyError, IndexError, TypeError) as exc:
            raise BadBody(f"no data[0].b64_json in the answer ({type(exc).__name__})") from exc
        if not isinstance(encoded, str):
            raise BadBody("data[0].b64_json is not a string")
        data = base64.b64decode(encoded, validate=True)
        media_type = sniff_image_type(data)
        return Result(data, media_type, _request_id(response), {"model": self.model, **_image_size(data)})


def _image_size(data: bytes) -> dict:
    from PIL import Image, UnidentifiedImageError  # only the header is read

    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except (UnidentifiedImageError, Image.DecompressionBombError, OSError, SyntaxError) as exc:
        raise BadBody(f"image header unreadable: {exc}") from exc
    return {"width": width, "height": height}


class OpenAISpeechProvider:
    """`POST {base}/v1/audio/speech`; the answer body is the audio."""

    name = "openai-tts"
    supports_lookup = False

    def __init__(self, *, base_url: str, api_key: str, model: str, session: requests.Session,
                 timeout: tuple[float, float], voice: str = "alloy", response_format: str = "wav",
                 honours_idempotency_key: bool = False) -> None:
        if response_format not in _AUDIO_TYPES:
            raise ValueError(f"response_format {response_format!r}: choose one of {', '.join(_AUDIO_TYPES)}")
        self._http = _HttpEndpoint(base_url, api_key, session, timeout)
        self.model = model
        self.voice = voice
        self.response_format = response_format
        self.honours_idempotency_key = honours_idempotency_key

    def __repr__(self) -> str:
        return f"OpenAISpeechProvider(base_url={self._http.base_url!r}, model={self.model!r}, voice={self.voice!r})"

    def generate(self, request: GenerateRequest) -> Result:
        _check_request(request, "audio", self.name)
        payload = {
            "model": request.params.get("model") or self.model, "input": request.text,
            "voice": request.params.get("voice") or self.voice, "response_format": self.response_format,
        }
        return self._http.post("/v1/audio/speech", payload, request.idempotency_key, self._parse)

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        return Unsupported()  # the API cannot be asked what happened to a key

    def _parse(self, response: requests.Response) -> Result:
        data = response.content
        if not data:
            raise BadBody("the audio answer is empty")
        metadata: dict[str, Any] = {"model": self.model, "format": self.response_format}
        if self.response_format == "wav":
            metadata.update(_wav_info(data))
        return Result(data, _AUDIO_TYPES[self.response_format], _request_id(response), metadata)


def _wav_info(data: bytes) -> dict:
    try:
        with wave.open(io.BytesIO(data), "rb") as audio:
            rate, frames = audio.getframerate(), audio.getnframes()
    except (wave.Error, EOFError) as exc:
        raise BadBody(f"the WAV answer is unreadable: {exc}") from exc
    return {"sample_rate": rate, "duration_ms": round(frames * 1000 / rate) if rate else 0}
