"""Prices from the model catalogue: estimates before a call, reported figures after it, the batch discount, the
overrides."""

import pytest

from pipeline import settings
from pipeline.core import prices
from pipeline.core.errors import ConfigError

OPENAI = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.openai.com/v1", "IMAGE_API_KEY": "sk-x",
          "IMAGE_DAILY_BUDGET": "5"}


def test_a_gpt_image_2_model_is_priced_by_quality_and_by_area_and_auto_as_the_dearest():
    assert prices.image_estimate("gpt-image-2.6-sunburst", "1024x1024", "low") == 0.006
    assert prices.image_estimate("gpt-image-2.6-sunburst", "1024x1024", "medium") == 0.053
    assert prices.image_estimate("gpt-image-2.6-sunburst", "1024x1024", "auto") == prices.image_estimate(
        "gpt-image-2.6-sunburst", "1024x1024", "high") == 0.211
    # a larger image by its area, a smaller one never below 1024x1024
    assert prices.image_estimate("gpt-image-2", "2048x1024", "high") == pytest.approx(0.422)
    assert prices.image_estimate("gpt-image-2", "1024x640", "high") == 0.211
    assert prices.image_estimate("gpt-image-2.5-flare-2026-09-08", "1024x1024", "low", batch=True) == 0.003


def test_a_shut_down_model_keeps_its_prices_for_the_calls_made_before_and_an_unknown_one_has_none():
    assert prices.image_estimate("gpt-image-1", "1536x1024", "medium") == 0.063
    assert prices.image_estimate("gpt-image-1-mini", "1024x1536", "high", batch=True) == 0.026
    assert prices.image_estimate("dall-e-3", "1024x1792", None) == 0.08
    assert prices.image_estimate("someone-elses-model", "1024x1024", "low") is None


def test_reported_usage_prices_text_and_image_output_tokens_apart():
    usage = {"input_tokens": 50, "input_tokens_details": {"text_tokens": 50, "image_tokens": 0},
             "output_tokens": 7124, "output_tokens_details": {"text_tokens": 100, "image_tokens": 7024}}
    figure = prices.image_reported("gpt-image-2.6-sunburst", usage)
    # 50 text in at $5, 100 text out at $10, 7024 image out at $30 per million
    assert figure == pytest.approx((50 * 5 + 100 * 10 + 7024 * 30) / 1e6, abs=1e-6)
    all_image = prices.image_reported("gpt-image-2.6-sunburst", {**usage, "output_tokens_details": None})
    assert all_image == pytest.approx((50 * 5 + 7124 * 30) / 1e6, abs=1e-6)   # an answer without the split
    assert prices.image_reported("gpt-image-2.6-sunburst", usage, batch=True) == pytest.approx(figure / 2, abs=1e-6)
    assert prices.image_reported("gpt-image-2", {"output_tokens": "many"}) is None
    assert prices.image_reported("dall-e-3", usage) is None  # priced per image only


def test_speech_is_priced_by_characters_or_by_minutes_of_audio():
    assert prices.speech_estimate("tts-1", 1000) == 0.015
    assert prices.speech_estimate("gpt-4o-mini-tts-2025-12-15", 750) == 0.015   # a snapshot priced as its model
    assert prices.speech_reported("gpt-4o-mini-tts", 750, 120_000) == 0.03          # two minutes came back


def test_the_catalogue_prices_a_paid_provider_and_a_setting_overrides_it():
    table = settings.load(OPENAI)
    assert table.providers["image"].priced_by == "table" and table.providers["image"].cost_per_call == 0.211
    low = settings.load({**OPENAI, "IMAGE_QUALITY": "low"})
    assert low.providers["image"].cost_per_call == 0.006
    assert prices.estimate(low.providers["image"], "image", {"model": "gpt-image-2", "size": "1024x1024"}, batch=True) == 0.003
    fixed = settings.load({**OPENAI, "IMAGE_COST_PER_CALL": "0.2"})
    assert fixed.providers["image"].priced_by == "IMAGE_COST_PER_CALL"
    assert prices.estimate(fixed.providers["image"], "image", {}, batch=True) == 0.1
    assert prices.reported(fixed.providers["image"], "image", {}, {"usage": {"output_tokens": 1}}) is None


def test_a_budget_on_a_model_the_catalogue_does_not_know_needs_a_cost():
    with pytest.raises(ConfigError, match="IMAGE_COST_PER_CALL"):
        settings.load({**OPENAI, "IMAGE_MODEL": "someone-elses-model"})


def test_the_batch_lane_needs_the_openai_image_provider():
    with pytest.raises(ConfigError, match="IMAGE_PROVIDER=openai"):
        settings.load({"IMAGE_BULK_BACKEND": "batch"})
    assert settings.load({**OPENAI, "IMAGE_BULK_BACKEND": "batch"}).image_bulk_backend == "batch"
