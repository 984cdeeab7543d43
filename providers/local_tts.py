"""An offline speech provider: eSpeak NG through ctypes, WAV out.

This module owns the voice routing (locale -> eSpeak voice), the ctypes
binding to the libespeak-ng shipped by the optional `espeakng-loader`
package, and the `LocalSpeechProvider` adapter (journal and armed faults via
`journal.LocalProvider`). eSpeak NG is GPL-3.0-or-later, so nothing here is
imported by `providers/__init__`; the package is imported when a provider is
constructed, and its absence is a clear ProviderConfigError then.

The engine is one global per process and not thread-safe: every use holds
`_ENGINE_LOCK`, and it is initialised once, lazily, with the package's own
data path (eSpeak falls back to system paths otherwise) and the don't-exit
flag (without it a bad data path ends the process). It must not know about
tasks, receipts or databases.
"""

from __future__ import annotations

import array
import ctypes
import io
import re
import sys
import threading
import time
import uuid
import wave
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .base import GenerateRequest, Result
from .errors import Permanent, ProviderConfigError, Transient
from .journal import LocalProvider

AUDIO_OUTPUT_SYNCHRONOUS = 2
ESPEAK_INITIALIZE_DONT_EXIT = 0x8000
ESPEAK_CHARS_UTF8 = 1
POS_CHARACTER = 1
MAX_TEXT_CHARS = 4096

MANDARIN, ENGLISH = "cmn", "en-us"
SUPPORTED_LOCALES = ("zh*", "cmn*", "en*")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def choose_voice(locale: str | None, voice: str | None, text: str, english: str = ENGLISH) -> str:
    """The eSpeak voice for a request; Permanent for a locale we cannot speak.

    Mandarin locales always get `cmn` (an English voice would read each
    character as "Chinese letter"); English locales get `english` unless an
    explicit English voice is asked for. Without a locale, an explicit voice
    wins, else the text decides: any Han character means Mandarin.
    """
    lang = (locale or "").strip().lower().replace("_", "-")
    wanted = (voice or "").strip()
    if lang.startswith(("zh", "cmn")):
        return MANDARIN
    if lang.startswith("en"):
        return wanted if wanted.lower().startswith("en") else english
    if lang:
        raise Permanent(
            f"locale {locale!r} is not supported by the local speech provider: "
            f"use one of {', '.join(SUPPORTED_LOCALES)}"
        )
    if wanted:
        return wanted
    return MANDARIN if _HAN.search(text) else english


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """16-bit mono little-endian PCM -> a WAV file."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(sample_rate)
        out.writeframes(pcm)
    return buffer.getvalue()


def _load_loader() -> Any:
    try:
        import espeakng_loader
    except ImportError as exc:
        raise ProviderConfigError(
            "the local speech provider needs the optional package espeakng-loader "
            "(eSpeak NG, GPL-3.0-or-later): pip install espeakng-loader==0.2.4, "
            "or choose another TTS backend"
        ) from exc
    return espeakng_loader


_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_ENGINE_LOCK = threading.Lock()


class _Engine:
    """The process's one eSpeak engine. Callers must hold `_ENGINE_LOCK`."""

    def __init__(self, library_path: str, data_path: str) -> None:
        lib = ctypes.CDLL(library_path)
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
        lib.espeak_SetSynthCallback.restype = None
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]
        lib.espeak_Synth.restype = ctypes.c_int
        rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, data_path.encode(), ESPEAK_INITIALIZE_DONT_EXIT)
        if rate <= 0:
            raise Permanent(f"eSpeak NG failed to initialise with data path {data_path!r} (code {rate})")
        self.sample_rate = rate
        self._lib = lib
        self._chunks: list[bytes] = []
        # ctypes does not keep the callback alive; eSpeak calls it long after
        # SetSynthCallback returns, so the object must live as long as the engine.
        self._callback = _CALLBACK(self._collect)
        lib.espeak_SetSynthCallback(self._callback)

    def _collect(self, wav: Any, count: int, _events: Any) -> int:
        if wav and count > 0:
            self._chunks.append(ctypes.string_at(wav, count * 2))
        return 0  # 0 = keep synthesising

    def synthesise(self, text: str, voice: str) -> bytes:
        """Little-endian 16-bit PCM for `text` spoken by `voice`."""
        code = self._lib.espeak_SetVoiceByName(voice.encode())
        if code != 0:
            raise Permanent(f"eSpeak NG has no voice {voice!r} (error {code}); try {MANDARIN!r} or {ENGLISH!r}")
        self._chunks = []
        encoded = text.encode("utf-8") + b"\0"
        code = self._lib.espeak_Synth(encoded, len(encoded), 0, POS_CHARACTER, 0, ESPEAK_CHARS_UTF8, None, None)
        if code != 0:
            raise Transient(f"eSpeak NG synthesis failed (error {code})")
        pcm = b"".join(self._chunks)
        self._chunks = []
        if sys.byteorder == "big":
            samples = array.array("h", pcm)
            samples.byteswap()
            pcm = samples.tobytes()
        return pcm


_engine: _Engine | None = None


def _engine_locked(loader: Any) -> _Engine:
    global _engine
    if _engine is None:
        try:
            _engine = _Engine(loader.get_library_path(), loader.get_data_path())
        except (OSError, RuntimeError) as exc:
            # A broken install does not heal on retry: fail the task with the cause.
            raise Permanent(f"eSpeak NG could not be loaded: {exc}") from exc
    return _engine


def synthesise_wav(text: str, voice: str, loader: Any) -> tuple[bytes, dict]:
    """Speak `text` with `voice`; returns (WAV bytes, metadata including CPU time)."""
    with _ENGINE_LOCK:
        engine = _engine_locked(loader)
        cpu_started = time.process_time()
        pcm = engine.synthesise(text, voice)
        cpu_seconds = time.process_time() - cpu_started
        rate = engine.sample_rate
    frames = len(pcm) // 2
    metadata = {
        "sample_rate": rate, "channels": 1, "voice": voice,
        "duration_ms": round(frames * 1000 / rate), "synth_cpu_ms": round(cpu_seconds * 1000, 2),
    }
    return wav_bytes(pcm, rate), metadata


def check_text(text: str) -> str:
    spoken = text.strip() if isinstance(text, str) else ""
    if not spoken:
        raise Permanent("speech text is empty: give the words to narrate")
    if len(spoken) > MAX_TEXT_CHARS:
        raise Permanent(f"speech text has {len(spoken)} characters; the limit is {MAX_TEXT_CHARS}")
    return spoken


class LocalSpeechProvider(LocalProvider):
    """Offline TTS provider with a journal (lookup) and armed faults (demo mode).

    State lives under `journal_dir/local-tts/`. `voice` is the default English
    voice (e.g. "en-gb"); any other value is ignored, since a Mandarin request
    must get `cmn` and a request may name its own voice.
    """

    name = "local-tts"
    kind = "audio"

    def __init__(self, journal_dir: Path, *, model: str = "espeak-ng", voice: str = "") -> None:
        self._loader = _load_loader()
        self.model = model
        self.voice = voice
        self._open_state(journal_dir)

    def __repr__(self) -> str:
        return f"LocalSpeechProvider(model={self.model!r}, voice={self.voice!r})"

    def _make(self, request: GenerateRequest) -> Result:
        text = check_text(request.text)
        params: Mapping[str, Any] = request.params
        english = self.voice if self.voice.lower().startswith("en") else ENGLISH
        voice = choose_voice(params.get("locale"), params.get("voice"), text, english)
        data, metadata = synthesise_wav(text, voice, self._loader)
        metadata["model"] = self.model
        return Result(data, "audio/wav", f"local-tts-{uuid.uuid4().hex}", metadata)
