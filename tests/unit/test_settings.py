import pytest

from pipeline import settings
from pipeline.core.errors import ConfigError


def test_defaults_need_no_environment():
    cfg = settings.load({})
    assert cfg.port == 8000 and cfg.database_url is None and cfg.providers["image"].backend == "local"


@pytest.mark.parametrize("env, named", [
    ({"PORT": "eighty"}, "PORT"),
    ({"PORT": "70000"}, "PORT"),
    ({"DATABASE_URL": "mysql://x/y"}, "DATABASE_URL"),
    ({"REDIS_URL": "valkey://127.0.0.1:6379"}, "REDIS_URL"),
    ({"SECRET_KEY": "short"}, "SECRET_KEY"),
    ({"SECRET_KEY": "x" * 31}, "SECRET_KEY is too short"),
    ({"LAB_API_KEY": "x" * 31}, "LAB_API_KEY is too short"),
    ({"METRICS_TOKEN": "x" * 31}, "METRICS_TOKEN is too short"),
    ({"TRUSTED_PROXIES": "6"}, "TRUSTED_PROXIES"),
    ({"SESSION_IDLE_SECONDS": "1"}, "SESSION_IDLE_SECONDS"),
    ({"MEDIA_URL_TTL_SECONDS": "0"}, "MEDIA_URL_TTL_SECONDS"),
    ({"KEY_SAVES_PER_MINUTE": "0"}, "KEY_SAVES_PER_MINUTE"),
    ({"KEY_MAX_PENDING_TASKS": "-1"}, "KEY_MAX_PENDING_TASKS"),
    ({"MAX_PENDING_TASKS": "0"}, "MAX_PENDING_TASKS"),
    ({"LEASE_SECONDS": "-1"}, "LEASE_SECONDS"),
    ({"IMAGE_PROVIDER": "dalle"}, "IMAGE_PROVIDER"),
    ({"TTS_PROVIDER": "openai"}, "TTS_PROVIDER=openai needs"),
    ({"IMAGE_HONOURS_IDEMPOTENCY_KEY": "maybe"}, "IMAGE_HONOURS_IDEMPOTENCY_KEY"),
    ({"LEASE_SECONDS": "5", "HEARTBEAT_SECONDS": "10"}, "HEARTBEAT_SECONDS"),
    ({"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "http://api.example.com/v1", "IMAGE_API_KEY": "k"},
     "IMAGE_BASE_URL.*https://"),
    ({"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.example.com/v1", "IMAGE_API_KEY": "k"},
     "IMAGE_PROVIDER=openai is a paid provider and needs a spend cap: set IMAGE_DAILY_BUDGET .* "
     "IMAGE_DAILY_BUDGET=unlimited"),
    ({"TTS_PROVIDER": "openai", "TTS_BASE_URL": "https://api.example.com/v1", "TTS_API_KEY": "k",
      "TTS_MODEL": "a-compatible-servers-voice", "TTS_DAILY_BUDGET": "20"},
     "TTS_DAILY_BUDGET=20 can never be reached while a call costs 0 .* set TTS_COST_PER_CALL"),
    ({"KEY_DAILY_SPEND": "lots"}, "KEY_DAILY_SPEND='lots' is not a number"),
    ({"IMAGE_QUALITY": "ultra"}, "IMAGE_QUALITY"),
    ({"IMAGE_OUTPUT_FORMAT": "gif"}, "IMAGE_OUTPUT_FORMAT"),
    ({"TTS_MAX_BYTES": "10"}, "TTS_MAX_BYTES"),
    ({"IMAGE_CALL_TIMEOUT": "0"}, "IMAGE_CALL_TIMEOUT"),
])
def test_an_invalid_value_is_refused_with_its_name(env, named):
    with pytest.raises(ConfigError, match=named):
        settings.load(env)


def test_valid_values_are_parsed():
    cfg = settings.load({"PORT": "9001", "DATABASE_URL": "postgresql://u@h:5/db", "DEMO_MODE": "yes",
                         "IMAGE_MAX_CONCURRENCY": "2", "TTS_READ_TIMEOUT": "1.5"})
    assert (cfg.port, cfg.database_url, cfg.demo_mode) == (9001, "postgresql://u@h:5/db", True)
    assert cfg.providers["image"].max_concurrency == 2 and cfg.providers["tts"].read_timeout == 1.5


def test_secrets_stay_out_of_the_repr():
    cfg = settings.load({"SECRET_KEY": "s3cr3t-" * 6, "IMAGE_API_KEY": "sk-very-secret", "METRICS_TOKEN": "m3tr1cs-" * 5,
                         "LAB_API_KEY": "l4b-" * 10})
    assert all(word not in repr(cfg) for word in ("s3cr3t", "sk-very-secret", "m3tr1cs", "l4b-"))


OPENAI = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.openai.com/v1", "IMAGE_API_KEY": "sk-i",
          "TTS_PROVIDER": "openai", "TTS_BASE_URL": "https://api.openai.com/v1", "TTS_API_KEY": "sk-t",
          "IMAGE_DAILY_BUDGET": "unlimited", "TTS_DAILY_BUDGET": "unlimited"}


def test_choosing_openai_takes_its_own_default_models_and_voice_never_the_local_ones():
    cfg = settings.load(OPENAI)
    assert (cfg.providers["image"].model, cfg.providers["image"].size) == ("gpt-image-2.6-sunburst", "1024x1024")
    assert (cfg.providers["tts"].model, cfg.providers["tts"].voice) == ("gpt-4o-mini-tts", "alloy")


def test_the_local_backends_keep_their_own_models():
    cfg = settings.load({})
    assert (cfg.providers["image"].model, cfg.providers["tts"].model, cfg.providers["tts"].voice) == ("local-card-v1", "espeak-ng-1.52", "")


def test_a_model_voice_or_size_that_is_set_wins_over_the_backends_default():
    cfg = settings.load({**OPENAI, "IMAGE_MODEL": "gpt-image-2", "IMAGE_SIZE": "1792x1008", "TTS_VOICE": "nova"})
    assert (cfg.providers["image"].model, cfg.providers["image"].size, cfg.providers["tts"].voice) == ("gpt-image-2", "1792x1008", "nova")


def test_model_options_are_read_only_when_set_and_only_for_their_kind():
    cfg = settings.load({"IMAGE_QUALITY": "high", "IMAGE_OUTPUT_FORMAT": "webp", "TTS_INSTRUCTIONS": "slowly",
                         "TTS_QUALITY": "high"})
    assert cfg.providers["image"].options == (("quality", "high"), ("output_format", "webp"))
    assert cfg.providers["tts"].options == (("instructions", "slowly"),)
    assert settings.load({}).providers["image"].options == ()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080/v1", "http://localhost:8080", "https://llm.example.com"])
def test_a_base_url_is_https_or_on_this_machine(url):
    cfg = settings.load({"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": url, "IMAGE_API_KEY": "k",
                         "IMAGE_DAILY_BUDGET": "unlimited"})
    assert cfg.providers["image"].base_url == url


def test_a_providers_settings_default_to_the_adapters_own_and_reach_it_whole():
    from dataclasses import fields

    from pipeline.executor import provider_config
    from pipeline.settings import ADAPTER, ProviderSettings
    from providers.registry import ProviderConfig
    shared = [f.name for f in fields(ProviderConfig) if f.name != "base_url"]
    assert {name: getattr(ProviderSettings(), name) for name in shared} == {n: getattr(ADAPTER, n) for n in shared}
    tuned = settings.load({"IMAGE_CONNECT_TIMEOUT": "1.5", "IMAGE_READ_TIMEOUT": "7", "IMAGE_MAX_BYTES": "4096",
                           "IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.example.com/v1",
                           "IMAGE_API_KEY": "sk-x", "IMAGE_DAILY_BUDGET": "unlimited"}).providers["image"]
    assert provider_config(tuned) == ProviderConfig(**{n: getattr(tuned, n) for n in shared},
                                                    base_url="https://api.example.com/v1")


def test_a_paid_providers_cap_is_a_number_or_unlimited_said_out_loud():
    paid = {"IMAGE_PROVIDER": "openai", "IMAGE_BASE_URL": "https://api.example.com/v1", "IMAGE_API_KEY": "k"}
    assert settings.load({**paid, "IMAGE_DAILY_BUDGET": "unlimited"}).providers["image"].daily_budget is None
    capped = settings.load({**paid, "IMAGE_DAILY_BUDGET": "25", "IMAGE_COST_PER_CALL": "0.04"}).providers["image"]
    assert (capped.daily_budget, capped.cost_per_call) == (25.0, 0.04)
    # the local providers cost nothing and need no cap
    assert settings.load({}).providers["image"].daily_budget is None
