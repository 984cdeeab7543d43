"""The model catalogue (providers/openai_models.py): complete, dated, and what the settings check makes of it."""

from datetime import date
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from pipeline import settings
from pipeline.core.errors import ConfigError
from providers import openai_models as catalogue
from testkit.fakeprovider import contract

TODAY = date(2026, 12, 6)
OPENAI = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.openai.com/v1", "IMAGE_API_KEY": "sk-i",
          "TTS_PROVIDER": "openai", "TTS_BASE_URL": "https://api.openai.com/v1", "TTS_API_KEY": "sk-t",
          "IMAGE_DAILY_BUDGET": "5", "TTS_DAILY_BUDGET": "5"}
ALL = [*catalogue.IMAGE_MODELS.values(), *catalogue.SPEECH_MODELS.values()]


@pytest.mark.parametrize("model", ALL, ids=lambda m: m.name)
def test_every_model_cites_the_page_it_was_read_from(model):
    assert model.source.startswith("https://developers.openai.com/api/")


@pytest.mark.parametrize("model", [m for m in ALL if not catalogue.is_shut_down(m, TODAY)], ids=lambda m: m.name)
def test_every_live_model_has_a_price(model):
    if isinstance(model, catalogue.ImageModel):
        assert model.tokens is not None and model.tokens.image_output > 0 and model.tokens.text_output > 0
        for quality in model.qualities:
            assert catalogue.per_image(model, quality, "1024x1024") > 0
    else:
        assert (model.per_million_chars or model.per_minute or 0) > 0


@pytest.mark.parametrize("model", [m for m in ALL if m.shut_down], ids=lambda m: m.name)
def test_every_model_with_a_shutdown_date_names_a_replacement_that_is_live_that_day(model):
    replacement = catalogue.image_model(model.replacement) or catalogue.speech_model(model.replacement)
    if replacement is None:   # the speech models' successor speaks another API, which the note says
        assert isinstance(model, catalogue.SpeechModel) and model.replacement_note
        return
    assert not catalogue.is_shut_down(replacement, model.shut_down)


def test_the_defaults_are_live_today_and_the_image_default_is_what_the_deprecations_page_names():
    for model in (catalogue.image_model(catalogue.CURRENT_IMAGE), catalogue.speech_model(catalogue.CURRENT_SPEECH)):
        assert not catalogue.is_shut_down(model, TODAY)
    assert catalogue.IMAGE_MODELS["gpt-image-1-mini"].replacement == catalogue.CURRENT_IMAGE


def test_a_dated_snapshot_is_its_model():
    assert catalogue.image_model("gpt-image-2-2026-04-21").name == "gpt-image-2"
    assert catalogue.speech_model("gpt-4o-mini-tts-2025-12-15").name == "gpt-4o-mini-tts"
    assert catalogue.image_model("gpt-image-2-2099-01-01") is None


@pytest.mark.parametrize("model, shut", [("gpt-image-1", "2026-10-23"), ("gpt-image-1-mini", "2026-12-01"),
                                         ("gpt-image-1.5-2025-12-16", "2026-12-01"), ("dall-e-3", "2026-05-12")])
def test_a_shut_down_image_model_stops_the_start_naming_its_date_and_replacement(model, shut):
    with pytest.raises(ConfigError, match=rf"IMAGE_MODEL=.*shut this model down on {shut}.*names gpt-image-2"):
        settings.load({**OPENAI, "IMAGE_MODEL": model}, today=TODAY)


def test_the_speech_models_run_until_their_shutdown_day_and_then_stop_the_start():
    assert settings.load(OPENAI, today=date(2027, 1, 5)).providers["tts"].model == "gpt-4o-mini-tts"
    with pytest.raises(ConfigError, match="TTS_MODEL='gpt-4o-mini-tts'.*2027-01-06"):
        settings.load(OPENAI, today=date(2027, 1, 6))


@pytest.mark.parametrize("size, why", [("1000x1000", "multiples of 16"), ("4096x2160", "at most 3840x2160"),
                                       ("3840x3840", "at most 3840x2160"), ("512x512", "at least"),
                                       ("2400x768", "3 times the short one"), ("big", "WIDTHxHEIGHT")])
def test_a_size_the_model_does_not_take_stops_the_start(size, why):
    with pytest.raises(ConfigError, match=rf"IMAGE_SIZE='{size}'.*{why}"):
        settings.load({**OPENAI, "IMAGE_SIZE": size}, today=TODAY)


@pytest.mark.parametrize("size", ["1024x1024", "1536x1024", "3840x2160", "2160x3840", "1024x640", "1920x1088", "auto"])
def test_any_size_within_the_gpt_image_2_rules_is_taken(size):
    assert settings.load({**OPENAI, "IMAGE_SIZE": size}, today=TODAY).providers["image"].size == size


def test_options_the_model_does_not_take_stop_the_start():
    with pytest.raises(ConfigError, match="IMAGE_QUALITY='hd'"):
        settings.load({**OPENAI, "IMAGE_QUALITY": "hd"}, today=TODAY)
    with pytest.raises(ConfigError, match="IMAGE_BACKGROUND=transparent needs"):
        settings.load({**OPENAI, "IMAGE_BACKGROUND": "transparent", "IMAGE_OUTPUT_FORMAT": "jpeg"}, today=TODAY)
    with pytest.raises(ConfigError, match="TTS_INSTRUCTIONS: tts-1 does not take"):
        settings.load({**OPENAI, "TTS_MODEL": "tts-1", "TTS_INSTRUCTIONS": "slowly"}, today=TODAY)


def test_a_compatible_servers_own_model_is_not_judged_by_the_catalogue():
    cfg = settings.load({**OPENAI, "IMAGE_MODEL": "flux-dev", "IMAGE_SIZE": "999x999", "IMAGE_COST_PER_CALL": "0.01"},
                        today=TODAY)
    assert (cfg.providers["image"].model, cfg.providers["image"].size) == ("flux-dev", "999x999")


def test_speech_over_the_models_limits_is_named_with_its_length():
    model = catalogue.speech_model("gpt-4o-mini-tts")
    assert catalogue.speech_limit_refusal(model, "a" * 4000) is None                  # about 2,000 tokens at most
    assert "4097 characters" in catalogue.speech_limit_refusal(model, "a" * 4097)
    assert "at most 2000 tokens" in catalogue.speech_limit_refusal(model, "你" * 1001)
    assert catalogue.speech_limit_refusal(catalogue.speech_model("tts-1"), "你" * 4096) is None   # no token limit


lesson_text = st.text(st.sampled_from("abcdefghij klmnop,.!?0123456789你好学校春天的花园里有很多孩子。「」"), max_size=3000)


@hsettings(max_examples=300, deadline=None)
@given(lesson_text)
def test_the_token_estimate_never_falls_below_the_strict_fakes_count(text):
    # the save refuses by this estimate so that the provider (here: the fake, counting its own way) never refuses
    assert catalogue.speech_tokens_at_most(text) >= contract.speech_tokens(text)


def test_the_providers_page_names_every_model_of_the_catalogue_and_the_day_it_was_read():
    text = (Path(__file__).resolve().parents[2] / "docs" / "providers.md").read_text(encoding="utf-8")
    for name in [*catalogue.IMAGE_MODELS, *catalogue.SPEECH_MODELS]:
        assert f"`{name}`" in text, f"docs/providers.md does not name {name}"
    for model in ALL:
        if model.shut_down:
            assert model.shut_down.isoformat() in text, f"docs/providers.md lacks {model.name}'s shutdown date"
    assert f"read {catalogue.READ_ON}" in text
