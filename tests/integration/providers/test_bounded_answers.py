"""No answer can hold a worker or fill its memory: byte caps, one deadline per call, no decompression."""

from __future__ import annotations

import time

import pytest
import requests

from providers.base import GenerateRequest
from providers.errors import Ambiguous
from providers.registry import ProviderConfig, build_provider
from testkit.fakeprovider import Behaviour, FakeProviderServer


def provider(fake: FakeProviderServer, kind: str = "image", **changes):
    cfg = ProviderConfig(**{"backend": "openai", "base_url": fake.base_url + "/v1", "api_key": "sk-bounded",
                            "connect_timeout": 2.0, "read_timeout": 5.0, "call_timeout": 30.0, **changes})
    return build_provider(kind, cfg, session=requests.Session())


def call(adapter, seconds_left: float | None = None):
    kind = "image" if adapter.name == "openai-image" else "audio"
    return adapter.generate(GenerateRequest(kind, "a lantern", {}, "key-bounded", seconds_left))


def timed(adapter, **kwargs) -> tuple[BaseException, float]:
    started = time.monotonic()
    with pytest.raises(Ambiguous) as caught:
        call(adapter, **kwargs)
    return caught.value, time.monotonic() - started


def test_a_trickling_body_ends_at_the_calls_deadline_though_every_byte_beats_the_read_timeout(fake):
    # given: one byte every 0.2 s, a read timeout of 5 s (never reached) and a 1.5 s call deadline
    fake.script(Behaviour("trickle", seconds=0.2, size=40))
    adapter = provider(fake, call_timeout=1.5)
    # when
    error, elapsed = timed(adapter)
    # then: the call ends at its deadline as possibly charged
    assert "deadline" in str(error)
    assert 1.4 <= elapsed < 3.0


def test_the_time_left_before_the_tasks_deadline_shortens_the_call(fake):
    fake.script(Behaviour("trickle", seconds=0.2, size=40))
    error, elapsed = timed(provider(fake, call_timeout=30.0), seconds_left=1.0)
    assert "deadline" in str(error) and elapsed < 2.5


def test_each_read_waits_only_for_the_time_left_not_a_whole_read_timeout(fake):
    # given: bytes at 0 s, 2.5 s and 5 s, a 3 s deadline; the read started at 2.5 s may wait 0.5 s
    fake.script(Behaviour("trickle", seconds=2.5, size=3))
    error, elapsed = timed(provider(fake, call_timeout=3.0, read_timeout=30.0))
    # then: it ends near 3 s, not when the next byte comes at 5 s
    assert 2.9 <= elapsed < 4.2


def test_a_slow_first_byte_counts_against_the_same_deadline(fake):
    fake.script(Behaviour("delay", seconds=5))
    error, elapsed = timed(provider(fake, call_timeout=1.0, read_timeout=30.0))
    assert elapsed < 2.5


def test_an_answer_declared_over_the_cap_is_refused_before_it_is_read(fake):
    fake.script(Behaviour("huge", size=300 * 10**6))
    error, elapsed = timed(provider(fake, max_bytes=1 << 20))
    assert "over the cap" in str(error) and elapsed < 2.0


def test_an_undeclared_answer_stops_being_read_at_the_cap(fake):
    fake.script(Behaviour("huge", size=300 * 10**6, declare=False))
    error, elapsed = timed(provider(fake, "audio", max_bytes=2 << 20))
    assert "passed the cap" in str(error) and elapsed < 5.0


def test_a_compressed_answer_is_not_decompressed(fake):
    fake.script(Behaviour("compressed"))
    error, _ = timed(provider(fake))
    assert "gzip" in str(error)
    assert fake.recorded[-1].headers["Accept-Encoding"] == "identity"


def test_an_answer_within_the_limits_still_succeeds(fake):
    fake.script(Behaviour("delay", seconds=0.3))
    result = call(provider(fake, "audio", call_timeout=5.0, max_bytes=1 << 20))
    assert result.media_type == "audio/wav" and len(result.data) > 1000
