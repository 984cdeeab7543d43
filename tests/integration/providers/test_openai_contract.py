"""The OpenAI contract: payloads per model family, both base-URL spellings, and the strict fake's rules.

The fake refuses what the real API refuses (testkit/fakeprovider/contract.py cites the
reference for each rule), so an adapter that drifts from the contract fails here.
"""

from __future__ import annotations

import io
from datetime import date

import pytest
import requests
from PIL import Image

from providers.base import GenerateRequest
from providers.errors import ModelGone, Permanent, ProviderConfigError
from providers.openai_http import image_payload, speech_payload
from providers.registry import ProviderConfig, build_provider
from testkit.fakeprovider import FakeProviderServer

KEY = "sk-contract-test"


@pytest.fixture(scope="module")
def fake():
    with FakeProviderServer() as server:
        yield server


def provider(kind: str, base_url: str, **changes):
    cfg = ProviderConfig(**{"backend": "openai", "base_url": base_url, "api_key": KEY,
                            "connect_timeout": 2.0, "read_timeout": 5.0, **changes})
    return build_provider(kind, cfg, session=requests.Session())


def image(text: str = "a red lantern", **params) -> GenerateRequest:
    return GenerateRequest("image", text, params, "key-contract")


def speech(text: str = "你好", **params) -> GenerateRequest:
    return GenerateRequest("audio", text, params, "key-contract")


def last_body(fake: FakeProviderServer) -> dict:
    return fake.recorded[-1].body


@pytest.mark.parametrize("suffix", ["", "/", "/v1", "/v1/"])
def test_both_spellings_of_the_base_url_reach_the_same_endpoints(fake, suffix):
    result = provider("image", fake.base_url + suffix).generate(image())
    assert result.media_type == "image/png"
    assert provider("audio", fake.base_url + suffix).generate(speech()).media_type == "audio/wav"


def test_a_gpt_image_model_gets_no_response_format_and_its_options(fake):
    # given: the default image model with every GPT image option set
    adapter = provider("image", fake.base_url + "/v1",
                       options=(("quality", "low"), ("output_format", "jpeg"), ("background", "opaque")))
    # when
    result = adapter.generate(image())
    # then: the payload is the GPT image one and the answer is the format asked for
    assert last_body(fake) == {"model": "gpt-image-2.6-sunburst", "prompt": "a red lantern", "n": 1,
                               "size": "1024x1024", "quality": "low", "output_format": "jpeg", "background": "opaque"}
    assert result.media_type == "image/jpeg"
    assert Image.open(io.BytesIO(result.data)).format == "JPEG"


def test_dall_e_models_would_ask_for_base64_and_get_no_gpt_image_options():
    # shut down since 2026-05-12, but a compatible server may still serve the name
    assert image_payload("dall-e-3", "a red lantern", "1024x1024", {"quality": "high"}) == \
        {"model": "dall-e-3", "prompt": "a red lantern", "n": 1, "size": "1024x1024", "response_format": "b64_json"}


@pytest.mark.parametrize("model", ["gpt-image-1", "gpt-image-1-mini", "chatgpt-image-latest", "dall-e-3"])
def test_a_shut_down_image_model_is_answered_404_model_not_found_and_is_model_gone(fake, model):
    before = fake.stats()["executions_total"]
    with pytest.raises(ModelGone, match=f"HTTP 404: The model `{model}` does not exist"):
        provider("image", fake.base_url, model=model).generate(image())
    assert fake.stats()["executions_total"] == before


def test_a_speech_model_is_refused_from_its_shutdown_day_on(fake):
    provider("audio", fake.base_url).generate(speech())
    before = fake.stats()["executions_total"]
    # given: the day OpenAI's text-to-speech guide names for the shutdown of gpt-4o-mini-tts
    fake.set_today(date(2027, 1, 6))
    try:
        # then: the same call is now refused, and the refusal says the model is gone
        with pytest.raises(ModelGone):
            provider("audio", fake.base_url).generate(speech())
    finally:
        fake.set_today(None)
    assert fake.stats()["executions_total"] == before


def test_a_model_of_another_family_gets_the_minimal_payload():
    assert image_payload("sdxl-turbo", "a cat", "512x512", {"quality": "high"}) == \
        {"model": "sdxl-turbo", "prompt": "a cat", "n": 1, "size": "512x512"}
    assert speech_payload("kokoro", "hi", "af", "wav", {"instructions": "calm"}) == \
        {"model": "kokoro", "input": "hi", "voice": "af", "response_format": "wav"}


def test_instructions_go_only_to_the_speech_models_that_take_them(fake):
    calm = (("instructions", "speak slowly"),)
    provider("audio", fake.base_url, options=calm).generate(speech())
    assert last_body(fake)["instructions"] == "speak slowly"
    provider("audio", fake.base_url, model="tts-1", options=calm).generate(speech())
    assert "instructions" not in last_body(fake) and last_body(fake)["model"] == "tts-1"


def test_options_carried_by_the_request_win_over_the_providers_own(fake):
    adapter = provider("image", fake.base_url, options=(("quality", "low"),))
    adapter.generate(image(options={"quality": "high"}))
    assert last_body(fake)["quality"] == "high"


def test_an_unknown_model_is_refused_by_the_fake_as_the_api_does_and_is_permanent(fake):
    with pytest.raises(Permanent, match="Invalid value: 'local-card-v1'"):
        provider("image", fake.base_url, model="local-card-v1").generate(image())
    with pytest.raises(Permanent, match="Invalid value: 'espeak-ng-1.52'"):
        provider("audio", fake.base_url, model="espeak-ng-1.52").generate(speech())


def test_a_doubled_version_in_the_path_is_a_404_as_the_api_answers(fake):
    answer = requests.post(f"{fake.base_url}/v1/v1/images/generations", json={}, timeout=5,
                           headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 404
    assert answer.json()["error"]["message"] == "Invalid URL (POST /v1/v1/images/generations)"


GOOD_IMAGE = {"model": "gpt-image-2", "prompt": "a cat", "n": 1, "size": "1024x1024"}
GOOD_SPEECH = {"model": "gpt-4o-mini-tts", "input": "hi", "voice": "alloy", "response_format": "wav"}
# (rule, path, body, status, param or code the error names)
RULES = [
    ("response_format for a GPT image model", "images/generations",
     {**GOOD_IMAGE, "response_format": "b64_json"}, 400, "response_format"),
    ("unknown image parameter", "images/generations", {**GOOD_IMAGE, "seed": 7}, 400, "seed"),
    ("missing image model", "images/generations", {"prompt": "a cat"}, 400, "model"),
    ("missing prompt", "images/generations", {"model": "gpt-image-2"}, 400, "prompt"),
    ("unknown image model", "images/generations", {**GOOD_IMAGE, "model": "fake-image"}, 400, "model"),
    ("shut-down image model", "images/generations", {**GOOD_IMAGE, "model": "gpt-image-1.5"}, 404, None),
    ("size too small", "images/generations", {**GOOD_IMAGE, "size": "256x256"}, 400, "size"),
    ("side not a multiple of 16", "images/generations", {**GOOD_IMAGE, "size": "1000x1000"}, 400, "size"),
    ("size over 3840x2160", "images/generations", {**GOOD_IMAGE, "size": "3840x2176"}, 400, "size"),
    ("quality the model lacks", "images/generations", {**GOOD_IMAGE, "quality": "hd"}, 400, "quality"),
    ("eleven images", "images/generations", {**GOOD_IMAGE, "n": 11}, 400, "n"),
    ("prompt too long", "images/generations", {**GOOD_IMAGE, "prompt": "x" * 32001}, 400, "prompt"),
    ("unknown speech parameter", "audio/speech", {**GOOD_SPEECH, "pitch": 2}, 400, "pitch"),
    ("missing voice", "audio/speech", {k: v for k, v in GOOD_SPEECH.items() if k != "voice"}, 400, "voice"),
    ("missing input", "audio/speech", {k: v for k, v in GOOD_SPEECH.items() if k != "input"}, 400, "input"),
    ("missing speech model", "audio/speech", {k: v for k, v in GOOD_SPEECH.items() if k != "model"}, 400, "model"),
    ("unknown speech model", "audio/speech", {**GOOD_SPEECH, "model": "fake-tts"}, 400, "model"),
    ("unknown voice", "audio/speech", {**GOOD_SPEECH, "voice": "robot"}, 400, "voice"),
    ("unknown audio format", "audio/speech", {**GOOD_SPEECH, "response_format": "ogg"}, 400, "response_format"),
    ("instructions for tts-1", "audio/speech", {**GOOD_SPEECH, "model": "tts-1", "instructions": "calm"},
     400, "instructions"),
    ("input too long", "audio/speech", {**GOOD_SPEECH, "input": "x" * 4097}, 400, "input"),
    ("input over gpt-4o-mini-tts's tokens", "audio/speech", {**GOOD_SPEECH, "input": "你" * 2001}, 400, "input"),
]


@pytest.mark.parametrize("rule,path,body,status,param", RULES, ids=[r[0] for r in RULES])
def test_the_fake_refuses_what_the_api_refuses_in_the_apis_error_shape(fake, rule, path, body, status, param):
    before = fake.stats()["executions_total"]
    answer = requests.post(f"{fake.base_url}/v1/{path}", json=body, timeout=5,
                           headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == status
    error = answer.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert fake.stats()["executions_total"] == before  # refused before doing (and charging) anything


@pytest.mark.parametrize("path,body", [("images/generations", GOOD_IMAGE), ("audio/speech", GOOD_SPEECH)])
def test_the_fake_accepts_the_good_bodies_the_refusals_are_made_from(fake, path, body):
    answer = requests.post(f"{fake.base_url}/v1/{path}", json=body, timeout=5,
                           headers={"Authorization": f"Bearer {KEY}"})
    assert answer.status_code == 200


@pytest.mark.parametrize("header", [None, "Bearer ", "Basic abc"])
def test_a_call_without_a_bearer_key_is_a_401(fake, header):
    headers = {} if header is None else {"Authorization": header}
    answer = requests.post(f"{fake.base_url}/v1/audio/speech", json=GOOD_SPEECH, headers=headers, timeout=5)
    assert answer.status_code == 401 and "API key" in answer.json()["error"]["message"]


@pytest.mark.parametrize("url", ["http://api.example.com/v1", "http://10.0.0.5:8080", "ftp://127.0.0.1"])
def test_a_key_is_never_sent_in_clear_text_over_a_network(url):
    with pytest.raises(ProviderConfigError, match="https://"):
        provider("image", url)


@pytest.mark.parametrize("url", ["http://127.0.0.1:9/v1", "http://localhost:9", "http://[::1]:9/v1",
                                 "https://api.openai.com/v1"])
def test_https_or_a_server_on_this_machine_is_accepted(url):
    provider("image", url)


def test_a_model_option_that_is_set_is_part_of_the_input_fingerprint():
    from pipeline.core.content import parse_draft, plan_tasks

    draft = parse_draft({"title": "t", "locale": "en", "blocks": [{"key": "a", "text": "hello"}]})
    image = {"provider": "openai", "model": "gpt-image-2", "size": "1024x1024"}
    speech = {"provider": "openai", "model": "gpt-4o-mini-tts", "voice": "alloy"}
    plain = {"image": image, "tts": speech, "bundle": {}}
    with_options = {"image": {**image, "options": (("quality", "high"),)},
                    "tts": {**speech, "options": (("instructions", "slowly"),)}, "bundle": {}}
    before, after = plan_tasks(draft, plain), plan_tasks(draft, with_options)
    assert [t.fingerprint for t in before] != [t.fingerprint for t in after]
    assert "options" not in before[0].input and after[0].input["options"] == {"quality": "high"}
