"""The offline speech provider: real speech out of eSpeak NG, routed by locale."""

from __future__ import annotations

import array
import io
import math
import subprocess
import sys
import threading
import wave
from pathlib import Path

import pytest

from providers.base import GenerateRequest, NoRecord
from providers.errors import Permanent, ProviderConfigError
from providers.local_tts import LocalSpeechProvider, choose_voice, wav_bytes

ROOT = Path(__file__).resolve().parents[2]
MANDARIN_TEXT = "你好，欢迎来到校园生活"
ENGLISH_TEXT = "Hello, and welcome to campus life."
# Measured speech from eSpeak has an RMS of 2,700-4,300; digital silence is 0.
SPEECH_RMS = 1000


def read_wav(data: bytes) -> tuple[wave._wave_params, float]:
    with wave.open(io.BytesIO(data), "rb") as audio:
        params = audio.getparams()
        samples = array.array("h", audio.readframes(params.nframes))
    rms = math.sqrt(sum(s * s for s in samples) / len(samples)) if samples else 0.0
    return params, rms


@pytest.fixture
def provider(tmp_path):
    return LocalSpeechProvider(tmp_path)


def speak(provider: LocalSpeechProvider, text: str, key: str, **params):
    return provider.generate(GenerateRequest("audio", text, params, key))


@pytest.mark.parametrize("text, locale, voice", [
    (MANDARIN_TEXT, "zh-CN", "cmn"),
    (ENGLISH_TEXT, "en-US", "en-us"),
], ids=["mandarin", "english"])
def test_the_provider_speaks_audible_speech_as_16_bit_mono_wav(provider, text, locale, voice):
    result = speak(provider, text, "key-1", locale=locale)
    params, rms = read_wav(result.data)
    assert (params.nchannels, params.sampwidth, params.framerate) == (1, 2, 22050)
    assert params.nframes / params.framerate > 0.5
    assert rms > SPEECH_RMS
    assert result.media_type == "audio/wav"
    assert result.metadata["voice"] == voice
    assert result.metadata["duration_ms"] == round(params.nframes * 1000 / params.framerate)


def test_silence_would_fail_the_loudness_check():
    _, rms = read_wav(wav_bytes(b"\x00\x00" * 22050, 22050))
    assert rms < SPEECH_RMS


def test_mandarin_text_is_longer_spoken_than_a_short_english_word(provider):
    mandarin = speak(provider, MANDARIN_TEXT, "key-1", locale="cmn")
    word = speak(provider, "Hi", "key-2", locale="en")
    assert read_wav(mandarin.data)[0].nframes > 2 * read_wav(word.data)[0].nframes


@pytest.mark.parametrize("locale, voice, text, expected", [
    ("zh-CN", None, "你好", "cmn"),
    ("zh_TW", "en-us", "你好", "cmn"),
    ("cmn-Hans", None, "你好", "cmn"),
    ("en-GB", None, "hello", "en-us"),
    ("en", "en-gb", "hello", "en-gb"),
    ("en-US", "alloy", "hello", "en-us"),
    (None, None, "今天学习什么", "cmn"),
    (None, None, "what do we learn today", "en-us"),
    (None, "en-gb", "hello", "en-gb"),
])
def test_voices_are_routed_by_locale(locale, voice, text, expected):
    assert choose_voice(locale, voice, text) == expected


def test_an_unknown_locale_is_permanent_and_lists_the_supported_ones(provider):
    with pytest.raises(Permanent, match=r"'fr-FR'.*zh\*, cmn\*, en\*"):
        speak(provider, "bonjour", "key-1", locale="fr-FR")
    assert provider.lookup("key-1") == NoRecord()


def test_an_unknown_explicit_voice_is_permanent(provider):
    with pytest.raises(Permanent, match="no voice"):
        speak(provider, "hello", "key-1", voice="no-such-voice")


def test_empty_text_is_permanent(provider):
    with pytest.raises(Permanent, match="empty"):
        speak(provider, "  \n ", "key-1", locale="en")


def test_concurrent_calls_share_the_one_engine_safely(tmp_path):
    provider = LocalSpeechProvider(tmp_path)
    results: dict = {}

    def call(index: int) -> None:
        text = MANDARIN_TEXT if index % 2 else ENGLISH_TEXT
        results[index] = speak(provider, text, f"key-{index}")

    threads = [threading.Thread(target=call, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(results) == [0, 1, 2, 3]
    for index, result in results.items():
        params, rms = read_wav(result.data)
        assert params.nframes / params.framerate > 0.5 and rms > SPEECH_RMS, index


def test_a_missing_espeakng_loader_fails_at_construction_with_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # makes the import fail
    with pytest.raises(ProviderConfigError, match="espeakng-loader"):
        LocalSpeechProvider(tmp_path)


def test_importing_the_providers_package_does_not_load_the_gpl_engine():
    code = (
        "import sys, providers, providers.registry, providers.local_image, providers.openai_http; "
        "print(sorted(m for m in sys.modules if 'espeak' in m or m == 'providers.local_tts'))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == "[]"
