"""`tts`: a block's narration, one paid call to the speech provider (TTS_*) with its text. Its medium is `audio`
(docs/decisions.md, "The narration keeps its three names, each where it is stored, hashed or shown"). Pure."""

from __future__ import annotations

from pipeline.core import prices
from pipeline.core.kinds import Kind
from providers import openai_models as catalogue


def plan(setup, draft, block, planned) -> dict:
    data = {"kind": "audio", "provider": setup["provider"], "model": setup["model"], "voice": setup["voice"],
            "locale": draft.locale, "text": block.text}
    if block.nonce("tts"):
        data["regeneration"] = block.nonce("tts")
    if setup.get("options"):
        data["options"] = dict(setup["options"])
    return data


def estimate(p, data: dict, batch: bool) -> float | None:
    return prices.speech_estimate(data.get("model") or p.model, len(data.get("text", "")), batch=batch)


def reported(p, data: dict, metadata: dict, batch: bool) -> float | None:
    return prices.speech_reported(data.get("model") or p.model, len(data.get("text", "")),
                                  metadata.get("duration_ms"))


def request(data: dict) -> tuple[str, dict]:
    return data["text"], {"model": data["model"], "voice": data["voice"], "locale": data["locale"],
                          "options": data.get("options") or {}}


KIND = Kind("tts", "audio", per_block=True, word="narration", plan=plan, paid=True, estimate=estimate, reported=reported,
            request=request, provider_defaults={"model": "espeak-ng-1.52", "call_timeout": 120.0,
                                                "max_bytes": 64 * 1024 * 1024},
            backend_defaults={"local": {"model": "espeak-ng-1.52"},
                              "openai": {"model": catalogue.CURRENT_SPEECH, "voice": "alloy"}},
            provider_options={"instructions": None}, probe={"text": "x" * 1000})
