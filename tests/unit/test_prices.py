"""The price table: estimates before a call, reported figures after it, the batch discount, the overrides."""

import pytest

from pipeline import settings
from pipeline.core import prices
from pipeline.core.errors import ConfigError

OPENAI = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.openai.com/v1", "IMAGE_API_KEY": "sk-x",
          "IMAGE_DAILY_BUDGET": "5"}


def test_gpt_image_prices_by_quality_and_size_and_auto_is_priced_as_the_dearest():
    assert prices.image_estimate("gpt-image-1", "1024x1024", "low") == 0.011
    assert prices.image_estimate("gpt-image-1", "1536x1024", "medium") == 0.063
    assert prices.image_estimate("gpt-image-1", "1024x1024", "auto") == prices.image_estimate(
        "gpt-image-1", "1024x1024", "high") == 0.167
    assert prices.image_estimate("gpt-image-1-mini", "1024x1536", "high", batch=True) == 0.026
    assert prices.image_estimate("dall-e-3", "1024x1792", None) == 0.08
    assert prices.image_estimate("someone-elses-model", "1024x1024", "low") is None


def test_reported_usage_is_priced_per_token_and_matches_the_per_image_price():
    usage = {"input_tokens": 50, "input_tokens_details": {"text_tokens": 50, "image_tokens": 0},
             "output_tokens": 4160}
    figure = prices.image_reported("gpt-image-1", usage)
    assert figure == pytest.approx(0.167, abs=0.001)         # 4160 output tokens at $40 per million, plus the text
    assert prices.image_reported("gpt-image-1", usage, batch=True) == pytest.approx(figure / 2, abs=1e-6)
    assert prices.image_reported("gpt-image-1", {"output_tokens": "many"}) is None
    assert prices.image_reported("dall-e-3", usage) is None  # priced per image only


def test_speech_is_priced_by_characters_or_by_minutes_of_audio():
    assert prices.speech_estimate("tts-1", 1000) == 0.015
    assert prices.speech_estimate("gpt-4o-mini-tts-2025-12-15", 750) == 0.015   # a snapshot priced as its model
    assert prices.speech_reported("gpt-4o-mini-tts", 750, 120_000) == 0.03          # two minutes came back


def test_the_table_prices_a_paid_provider_and_a_setting_overrides_it():
    table = settings.load(OPENAI)
    assert table.image.priced_by == "table" and table.image.cost_per_call == 0.167
    low = settings.load({**OPENAI, "IMAGE_QUALITY": "low"})
    assert low.image.cost_per_call == 0.011
    assert prices.estimate(low.image, "image", {"model": "gpt-image-1", "size": "1024x1024"}, batch=True) == 0.0055
    fixed = settings.load({**OPENAI, "IMAGE_COST_PER_CALL": "0.2"})
    assert fixed.image.priced_by == "IMAGE_COST_PER_CALL"
    assert prices.estimate(fixed.image, "image", {}, batch=True) == 0.1
    assert prices.reported(fixed.image, "image", {}, {"usage": {"output_tokens": 1}}) is None


def test_a_budget_on_a_model_the_table_does_not_know_needs_a_cost():
    with pytest.raises(ConfigError, match="IMAGE_COST_PER_CALL"):
        settings.load({**OPENAI, "IMAGE_MODEL": "someone-elses-model"})


def test_the_batch_lane_needs_the_openai_image_provider():
    with pytest.raises(ConfigError, match="IMAGE_PROVIDER=openai"):
        settings.load({"IMAGE_BULK_BACKEND": "batch"})
    assert settings.load({**OPENAI, "IMAGE_BULK_BACKEND": "batch"}).image_bulk_backend == "batch"
