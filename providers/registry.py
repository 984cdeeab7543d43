"""Build the provider a configuration asks for.

This module owns `ProviderConfig` (plain, already-parsed settings) and
`build_provider`, the one place that maps (kind, backend) to an adapter. It
does not read the environment: another module fills `ProviderConfig`. The GPL
speech backend is imported only when a local TTS provider is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import requests

from .base import KINDS, Provider
from .errors import Permanent, ProviderConfigError
from .openai_models import CURRENT_IMAGE, CURRENT_SPEECH
from .urls import UnsafeBaseURL, check_scheme

BACKENDS = ("local", "openai")
# The languages each speech backend can speak, as locale prefixes; empty: any (the model reads the text's
# own language). eSpeak NG here speaks Mandarin and English (providers/local_tts.py routes them).
SPEECH_LOCALES: dict[str, tuple[str, ...]] = {"local": ("zh", "cmn", "en"), "openai": ()}


@dataclass(frozen=True)
class ProviderConfig:
    """Settings of one provider. `size` is used for images, `voice` for audio."""

    backend: str = "local"
    base_url: str = "https://api.openai.com/v1"
    api_key: str = field(default="", repr=False)
    model: str = ""
    size: str = ""
    voice: str = ""
    options: tuple[tuple[str, str], ...] = ()
    honours_idempotency_key: bool = False
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    call_timeout: float = 180.0
    max_bytes: int = 32 * 1024 * 1024


def build_provider(kind: str, cfg: ProviderConfig, *, session: requests.Session | None = None,
                   journal_dir: Path | None = None) -> Provider:
    """The provider for `kind` ("image" or "audio") as `cfg` describes; ProviderConfigError if invalid."""
    if kind not in KINDS:
        raise ProviderConfigError(f"provider kind {kind!r} is unknown: choose one of {', '.join(KINDS)}")
    if cfg.backend == "local":
        return _build_local(kind, cfg, journal_dir)
    if cfg.backend == "openai":
        return _build_openai(kind, cfg, requests.Session() if session is None else session)
    raise ProviderConfigError(f"provider backend {cfg.backend!r} is unknown: choose one of {', '.join(BACKENDS)}")


def _build_local(kind: str, cfg: ProviderConfig, journal_dir: Path | None) -> Provider:
    if journal_dir is None:
        raise ProviderConfigError("the local providers need a journal directory (journal_dir) to remember results")
    if kind == "image":
        from .local_image import LocalImageProvider

        try:
            return LocalImageProvider(journal_dir, model=cfg.model or "local-card-1", size=cfg.size or "1024x1024")
        except Permanent as exc:
            raise ProviderConfigError(f"image size setting: {exc}") from exc
    from .local_tts import LocalSpeechProvider  # GPL engine: imported only when chosen

    return LocalSpeechProvider(journal_dir, model=cfg.model or "espeak-ng", voice=cfg.voice)


def _build_openai(kind: str, cfg: ProviderConfig, session: requests.Session) -> Provider:
    from .http_endpoint import Limits
    from .openai_http import OpenAIImageProvider, OpenAISpeechProvider

    if not cfg.api_key:
        raise ProviderConfigError("the openai backend needs an API key; set one or choose the local backend")
    try:
        check_scheme(cfg.base_url)
    except UnsafeBaseURL as exc:
        raise ProviderConfigError(f"provider base URL: {exc}") from None
    if min(cfg.connect_timeout, cfg.read_timeout, cfg.call_timeout) <= 0 or cfg.max_bytes <= 0:
        raise ProviderConfigError("provider timeouts and the byte cap must be positive numbers")
    common = dict(
        base_url=cfg.base_url, api_key=cfg.api_key, session=session, options=dict(cfg.options),
        limits=Limits(cfg.connect_timeout, cfg.read_timeout, cfg.call_timeout, cfg.max_bytes),
        honours_idempotency_key=cfg.honours_idempotency_key,
    )
    if kind == "image":
        return OpenAIImageProvider(model=cfg.model or CURRENT_IMAGE, size=cfg.size or "1024x1024", **common)
    return OpenAISpeechProvider(model=cfg.model or CURRENT_SPEECH, voice=cfg.voice or "alloy", **common)
