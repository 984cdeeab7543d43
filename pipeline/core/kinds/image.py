"""`image`: a block's illustration, one paid call to the image provider (IMAGE_*), from its image prompt or, when it
has none, its text. Pure."""

from __future__ import annotations

from pipeline.core import prices
from pipeline.core.kinds import Kind
from providers import openai_models as catalogue


def plan(setup, draft, block, planned) -> dict:
    data = {"kind": "image", "provider": setup["provider"], "model": setup["model"], "size": setup["size"],
            "prompt": block.image_prompt or block.text, "theme": draft.theme}
    if block.nonce("image"):   # a regeneration: a new paid call, not the old picture
        data["regeneration"] = block.nonce("image")
    if setup.get("options"):   # only options that are set, so fingerprints without them stay as they were
        data["options"] = dict(setup["options"])
    return data


def estimate(p, data: dict, batch: bool) -> float | None:
    quality = (data.get("options") or {}).get("quality") or dict(p.options).get("quality")
    return prices.image_estimate(data.get("model") or p.model, data.get("size") or p.size, quality, batch=batch)


def reported(p, data: dict, metadata: dict, batch: bool) -> float | None:
    return prices.image_reported(data.get("model") or p.model, metadata.get("usage"), batch=batch)


def request(data: dict) -> tuple[str, dict]:
    """A regeneration's nonce asks a seeded renderer for another picture."""
    return data["prompt"], {"model": data["model"], "size": data["size"], "theme": data.get("theme"),
                            "options": data.get("options") or {}, "variation": data.get("regeneration")}


KIND = Kind("image", "image", per_block=True, word="image", plan=plan, paid=True, estimate=estimate, reported=reported,
            request=request, batchable=True, provider_defaults={"model": "local-card-v1", "size": "1024x1024"},
            backend_defaults={"local": {"model": "local-card-v1", "size": "1024x1024"},
                              "openai": {"model": catalogue.CURRENT_IMAGE, "size": "1024x1024"}},
            provider_options={"quality": ("low", "medium", "high", "auto", "standard", "hd"),
                              "output_format": ("png", "jpeg", "webp"),
                              "background": ("transparent", "opaque", "auto")})
