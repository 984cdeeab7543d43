"""How a failed HTTP call is classified: the one translation of third-party errors.

This module owns `classify`, which turns anything `requests`/`urllib3` raised, or a
non-2xx answer, into one of the four provider error classes. It follows one
question: could the provider have executed (and charged) the request?

* provably not sent (connection refused, DNS, TLS handshake, connect
  timeout; 408) -> Transient;
* refused for good (400, 401, 403, 404, 422, other 4xx) -> Permanent; a 400 whose code says the
  provider's safety system refused the prompt (`moderation_blocked`) -> Refused, a Permanent; a model the
  provider no longer serves (`model_not_found`) -> ModelGone, a Permanent;
* rate limited or still in progress (429, 503 with Retry-After; 409, the
  idempotency key's first request is still running) -> Busy;
* anything after the request may have arrived (read timeout, connection
  lost, 5xx, truncated, oversized, late or undecodable body) -> Ambiguous.

No I/O here; `http_endpoint` calls it in one place.
"""

from __future__ import annotations

import email.utils
import json
import ssl
import time
import traceback
from collections.abc import Mapping

import requests
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

from .errors import Ambiguous, Busy, ModelGone, Permanent, ProviderError, Refused, Transient

PERMANENT_STATUSES = frozenset({400, 401, 403, 404, 422})
# The codes of a refusal by the provider's safety system: OpenAI's image API answers 400 with
# `moderation_blocked` ("Your request was rejected by the safety system"; the "Image generation" guide,
# "Content moderation").
REFUSAL_CODES = frozenset({"moderation_blocked"})
# The code of a model the API no longer serves (or never did): OpenAI answers 404 `model_not_found` ("The model `X`
# does not exist or you do not have access to it."), as it does for a model past its shutdown date
# (developers.openai.com/api/docs/deprecations, read 2026-12-06).
GONE_CODES = frozenset({"model_not_found"})
DEFAULT_RETRY_AFTER = 1.0
# Where ssl errors raised during the handshake (or the hostname check right
# after it) come from: no request byte has been written at that point.
_HANDSHAKE_FRAMES = frozenset({"do_handshake", "_match_hostname", "match_hostname"})


class BadBody(ValueError):
    """A 2xx answer whose body we cannot use (the provider may still have charged)."""


class HttpStatus(Exception):
    """A non-2xx answer, read within the byte cap: its status, headers and body."""

    def __init__(self, status: int, headers: Mapping[str, str], body: bytes) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.headers, self.body = status, headers, body


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


def provider_message(body: bytes) -> str:
    """The provider's own words: `error.message` of an OpenAI-shaped body, else the text."""
    try:
        message = json.loads(body)["error"]["message"]
        if isinstance(message, str) and message:
            return message[:500]
    except (ValueError, KeyError, TypeError):
        pass
    return body.decode("utf-8", "replace").strip()[:300]


def provider_code(body: bytes) -> str | None:
    """`error.code` of an OpenAI-shaped error body, if it has one."""
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


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


def _classify_status(answer: HttpStatus) -> ProviderError:
    status = answer.status
    message = f"HTTP {status}: {provider_message(answer.body)}"
    retry_after = answer.headers.get("Retry-After")
    if status == 429 or (status == 503 and retry_after is not None):
        return Busy(message, retry_after=parse_retry_after(retry_after), http_status=status)
    if status == 409:
        # With an idempotency key, 409 means a request with this key is still
        # being processed: its outcome will be known later, so wait.
        return Busy(message, retry_after=parse_retry_after(retry_after), http_status=status)
    if status == 408:
        # The server gave up waiting for our request before it was complete.
        return Transient(message, http_status=status)
    if status == 400 and provider_code(answer.body) in REFUSAL_CODES:
        return Refused(message, http_status=status)
    if status in (400, 404) and provider_code(answer.body) in GONE_CODES:
        return ModelGone(message, http_status=status)
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
    if isinstance(exc, ProviderError):  # already classified where it was raised (cap, deadline)
        return exc
    if isinstance(exc, HttpStatus):
        return _classify_status(exc)
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
