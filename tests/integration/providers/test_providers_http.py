"""The HTTP adapters against a real fake provider server: classification, headers, secrets."""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import threading
import time

import pytest
import requests

from providers.base import GenerateRequest, Unsupported
from providers.errors import Ambiguous, Busy, Permanent, ProviderConfigError, Transient
from providers.http_classify import parse_retry_after
from providers.registry import ProviderConfig, build_provider
from testkit.fakeprovider import Behaviour, Calls, FakeProviderServer

SECRET = "sk-test-5f1c0ffee-do-not-print"
READ_TIMEOUT = 0.5


def make(kind: str, base_url: str, session: requests.Session | None = None, **changes):
    settings = dict(backend="openai", base_url=base_url, api_key=SECRET,
                    connect_timeout=2.0, read_timeout=READ_TIMEOUT)
    settings.update(changes)
    return build_provider(kind, ProviderConfig(**settings), session=session or requests.Session())


def request(kind: str, key: str = "key-0001") -> GenerateRequest:
    return GenerateRequest(kind, "a lighthouse at dusk", {}, key)


def wait_until(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met before the deadline")
        time.sleep(0.01)


# (row id, behaviour, expected class, requests counted, executions counted)
ROWS = [
    ("400", Behaviour.fail(400, message="prompt rejected by policy"), Permanent, 1, 0),
    ("401", Behaviour.fail(401, message="invalid api key"), Permanent, 1, 0),
    ("403", Behaviour.fail(403), Permanent, 1, 0),
    ("404", Behaviour.fail(404, message="model not found"), Permanent, 1, 0),
    ("422", Behaviour.fail(422), Permanent, 1, 0),
    ("408", Behaviour.fail(408), Transient, 1, 0),
    ("409 key still in progress", Behaviour.fail(409, retry_after=3), Busy, 1, 0),
    ("429 with Retry-After", Behaviour.fail(429, retry_after=7), Busy, 1, 0),
    ("503 with Retry-After", Behaviour.fail(503, retry_after=2), Busy, 1, 0),
    ("503 without Retry-After", Behaviour.fail(503), Ambiguous, 1, 0),
    ("500", Behaviour.fail(500, execute=True), Ambiguous, 1, 1),
    ("502", Behaviour.fail(502), Ambiguous, 1, 0),
    ("504", Behaviour.fail(504), Ambiguous, 1, 0),
    ("read timeout after accept", Behaviour("hang", seconds=5), Ambiguous, 1, 1),
    ("dropped after request", Behaviour("drop"), Ambiguous, 1, 1),
    ("reset after request", Behaviour("reset"), Ambiguous, 1, 1),
    ("truncated body", Behaviour("truncate"), Ambiguous, 1, 1),
    ("undecodable body", Behaviour("bad_body"), Ambiguous, 1, 1),
]


@pytest.mark.parametrize("kind", ["image", "audio"])
@pytest.mark.parametrize("row", ROWS, ids=[row[0] for row in ROWS])
def test_each_failure_the_fake_produces_is_classified_as_the_table_says(fake, kind, row):
    _, behaviour, expected, requests_counted, executions_counted = row
    fake.script(behaviour)
    provider = make(kind, fake.base_url)
    # when
    with pytest.raises(expected) as caught:
        provider.generate(request(kind))
    # then: the class, the cause kept, and exactly the calls the fake saw
    assert type(caught.value) is expected
    assert caught.value.__cause__ is not None
    assert fake.calls_for("key-0001") == Calls(requests_counted, executions_counted)
    if behaviour.action == "status":
        assert caught.value.http_status == behaviour.status


def test_busy_carries_the_retry_after_seconds_the_provider_sent(fake):
    fake.script(Behaviour.fail(429, retry_after=7), Behaviour.fail(503, retry_after="2"), Behaviour.fail(429))
    provider = make("image", fake.base_url)
    seen = []
    for _ in range(3):
        with pytest.raises(Busy) as caught:
            provider.generate(request("image"))
        seen.append(caught.value.retry_after)
    assert seen == [7.0, 2.0, 1.0]


def test_a_retry_after_date_becomes_seconds_from_now():
    now = 1_700_000_000.0
    date = "Tue, 14 Nov 2023 22:13:40 GMT"  # now + 20 s
    assert parse_retry_after(date, now=now) == pytest.approx(20.0)
    assert parse_retry_after("soon", now=now) == 1.0


def test_a_permanent_error_carries_the_providers_own_message(fake):
    fake.script(Behaviour.fail(400, message="size must be one of 1024x1024, 1792x1024"))
    with pytest.raises(Permanent, match="size must be one of 1024x1024"):
        make("image", fake.base_url).generate(request("image"))


def test_an_image_answer_with_bad_base64_is_ambiguous(fake):
    fake.script(Behaviour("bad_base64"))
    with pytest.raises(Ambiguous):
        make("image", fake.base_url).generate(request("image"))
    assert fake.calls_for("key-0001") == Calls(1, 1)


def test_a_refused_connection_is_transient_and_reaches_nobody(fake):
    provider = make("image", fake.base_url)
    fake.refuse_connections()
    with pytest.raises(Transient) as caught:
        provider.generate(request("image"))
    assert "NewConnectionError" in repr(caught.value.__cause__)
    assert fake.calls_for("key-0001") == Calls(0, 0)
    # once the port listens again, the same provider gets through
    fake.accept_connections()
    assert provider.generate(request("image")).media_type == "image/png"
    assert fake.calls_for("key-0001") == Calls(1, 1)


def test_a_refusal_for_a_period_ends_by_itself(fake):
    provider = make("audio", fake.base_url)
    fake.refuse_connections(seconds=0.3)
    with pytest.raises(Transient):
        provider.generate(request("audio"))

    def gets_through() -> bool:
        try:
            return provider.generate(request("audio")).media_type == "audio/wav"
        except Transient:
            return False

    wait_until(gets_through)


def test_a_failed_name_lookup_is_transient(monkeypatch):
    real = socket.getaddrinfo

    def no_such_host(host, *args, **kwargs):
        if host == "fake-provider.invalid":
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    # the resolver is replaced so no query leaves the machine; urllib3 and requests wrap it as usual
    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    with pytest.raises(Transient) as caught:
        make("image", "https://fake-provider.invalid:9").generate(request("image"))
    assert "NameResolutionError" in repr(caught.value.__cause__)


def test_a_tls_handshake_failure_is_transient_and_sends_no_request(fake):
    # the fake speaks plain HTTP, so an https client fails in the handshake
    provider = make("image", fake.base_url.replace("http://", "https://"))
    with pytest.raises(Transient) as caught:
        provider.generate(request("image"))
    assert isinstance(caught.value.__cause__, requests.exceptions.SSLError)
    assert fake.calls_for("key-0001") == Calls(0, 0)


def make_certificate(directory) -> tuple[str, str]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a throwaway certificate")
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True, timeout=60)
    return cert, key


def serve_tls_then_garble(cert: str, key: str, received: list) -> int:
    """A TLS server that completes the handshake, reads one request, then answers with a broken record."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with listener:
            conn, _ = listener.accept()
            with context.wrap_socket(conn, server_side=True) as tls:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += tls.recv(65536)
                received.append(data)
                # an application-data record of garbage: the client fails to decrypt it
                os.write(tls.fileno(), b"\x17\x03\x03\x00\x20" + b"x" * 32)
                tls.settimeout(5)
                try:
                    tls.recv(1)  # until the client gives up and closes
                except OSError:
                    pass

    threading.Thread(target=serve, daemon=True).start()
    return listener.getsockname()[1]


def test_a_tls_error_after_the_request_was_sent_is_ambiguous(tmp_path):
    cert, key = make_certificate(tmp_path)
    received: list = []
    port = serve_tls_then_garble(cert, key, received)
    session = requests.Session()
    session.verify = cert
    session.trust_env = False  # a CA bundle from the environment would override verify
    with pytest.raises(Ambiguous) as caught:
        make("image", f"https://127.0.0.1:{port}", session).generate(request("image"))
    # the same requests exception type as a failed handshake, but the request had left
    assert isinstance(caught.value.__cause__, requests.exceptions.SSLError)
    assert received and b"POST /v1/images/generations" in received[0]


class RecordingSession(requests.Session):
    """A real session that also notes the keyword arguments of every send."""

    def __init__(self) -> None:
        super().__init__()
        self.sends: list[dict] = []

    def send(self, prepared, **kwargs):
        self.sends.append(kwargs)
        return super().send(prepared, **kwargs)


def test_every_call_sends_the_bearer_key_the_idempotency_key_and_the_timeout(fake):
    session = RecordingSession()
    image = make("image", fake.base_url, session, connect_timeout=1.5, read_timeout=4.0)
    audio = make("audio", fake.base_url, session, connect_timeout=1.5, read_timeout=4.0)
    fake.script(Behaviour.fail(500))
    # when: a failing call and two good ones
    with pytest.raises(Ambiguous):
        image.generate(request("image", "key-a"))
    image.generate(request("image", "key-b"))
    audio.generate(request("audio", "key-c"))
    # then
    assert [send["timeout"] for send in session.sends] == [(1.5, 4.0)] * 3
    recorded = fake.recorded
    assert [r.headers["Authorization"] for r in recorded] == [f"Bearer {SECRET}"] * 3
    assert [r.headers["Idempotency-Key"] for r in recorded] == ["key-a", "key-b", "key-c"]
    assert recorded[1].body == {"model": "gpt-image-2.6-sunburst", "prompt": "a lighthouse at dusk",
                                "size": "1024x1024", "n": 1}
    assert recorded[2].body == {"model": "gpt-4o-mini-tts", "input": "a lighthouse at dusk", "voice": "alloy",
                                "response_format": "wav"}


def test_the_api_key_never_shows_in_reprs_or_error_messages(fake):
    fake.script(Behaviour.fail(401, message=f"key {SECRET} is revoked"), Behaviour("hang", seconds=5))
    provider = make("image", fake.base_url)
    messages = []
    for _ in range(2):
        with pytest.raises((Permanent, Ambiguous)) as caught:
            provider.generate(request("image"))
        messages.append(str(caught.value))
    assert "revoked" in messages[0]
    for text in [*messages, repr(provider), repr(ProviderConfig(api_key=SECRET))]:
        assert SECRET not in text


def test_a_good_answer_becomes_a_result_with_media_type_and_metadata(fake):
    image = make("image", fake.base_url).generate(request("image", "key-i"))
    audio = make("audio", fake.base_url).generate(request("audio", "key-a"))
    assert (image.media_type, image.metadata["width"], image.metadata["height"]) == ("image/png", 8, 8)
    assert image.data.startswith(b"\x89PNG") and image.provider_request_id.startswith("req_")
    assert (audio.media_type, audio.metadata["sample_rate"], audio.metadata["duration_ms"]) == ("audio/wav", 22050, 200)


def test_a_provider_that_honours_keys_answers_a_retry_with_the_first_result(fake):
    fake.honour_keys(True)
    fake.script(Behaviour("hang", seconds=5))
    provider = make("image", fake.base_url, honours_idempotency_key=True)
    with pytest.raises(Ambiguous):
        provider.generate(request("image"))
    again = provider.generate(request("image"))
    assert provider.honours_idempotency_key is True
    assert fake.calls_for("key-0001") == Calls(2, 1)
    assert again.provider_request_id == "req_1"


def test_a_provider_that_ignores_keys_executes_a_retry_again(fake):
    first = make("image", fake.base_url).generate(request("image"))
    second = make("image", fake.base_url).generate(request("image"))
    assert fake.calls_for("key-0001") == Calls(2, 2)
    assert first.data != second.data


def test_empty_text_is_refused_before_any_call(fake):
    with pytest.raises(Permanent):
        make("audio", fake.base_url).generate(GenerateRequest("audio", "  ", {}, "key-0001"))
    assert fake.stats()["requests_total"] == 0


def test_the_http_providers_cannot_look_up_a_key(fake):
    assert make("image", fake.base_url).lookup("key-0001") == Unsupported()
    assert make("audio", fake.base_url).supports_lookup is False


def test_the_registry_names_an_unknown_backend_and_the_choices():
    with pytest.raises(ProviderConfigError, match=r"'replicate'.*local, openai"):
        build_provider("image", ProviderConfig(backend="replicate"))


def test_the_registry_refuses_an_openai_backend_without_a_key():
    with pytest.raises(ProviderConfigError, match="API key"):
        build_provider("audio", ProviderConfig(backend="openai", api_key=""))


def test_the_fake_records_the_peak_of_concurrent_requests_per_endpoint(fake):
    fake.set_default(Behaviour("hold", seconds=10))
    provider = make("image", fake.base_url, read_timeout=10.0)
    errors: list = []

    def call(index: int) -> None:
        try:
            provider.generate(request("image", f"key-{index:04d}"))
        except Exception as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(3)]
    for thread in threads:
        thread.start()
    wait_until(lambda: fake.in_flight("image") == 3)
    fake.release()
    for thread in threads:
        thread.join(timeout=10)
    assert errors == []
    # the server counts a call out after its last byte is sent, which the client may see first
    wait_until(lambda: fake.in_flight("image") == 0)
    assert (fake.max_in_flight("image"), fake.max_in_flight("audio")) == (3, 0)


def test_the_fake_can_be_scripted_and_read_over_http(fake):
    control = requests.Session()
    answer = control.post(f"{fake.base_url}/_fake/script", timeout=5, json={
        "honour_keys": True, "behaviours": [{"action": "status", "status": 429, "retry_after": "3"}],
    })
    assert answer.status_code == 200 and answer.json()["queued"] == 1
    with pytest.raises(Busy):
        make("image", fake.base_url).generate(request("image"))
    stats = control.get(f"{fake.base_url}/_fake/stats", timeout=5).json()
    assert stats["keys"] == {"key-0001": {"requests": 1, "executions": 0}}
    assert stats["honour_keys"] is True
    bad = control.post(f"{fake.base_url}/_fake/script", timeout=5, json={"behaviours": [{"action": "explode"}]})
    assert bad.status_code == 400
    control.post(f"{fake.base_url}/_fake/reset", timeout=5)
    assert fake.stats()["requests_total"] == 0


def test_the_fake_stops_promptly_while_a_call_hangs():
    server = FakeProviderServer().start()
    server.set_default(Behaviour("hang", seconds=60))
    provider = make("image", server.base_url, read_timeout=30.0)
    outcome: list = []

    def call() -> None:
        try:
            outcome.append(provider.generate(request("image")))
        except Exception as exc:  # inspected below
            outcome.append(exc)

    caller = threading.Thread(target=call)
    caller.start()
    wait_until(lambda: server.in_flight("image") == 1)
    started = time.monotonic()
    server.stop()
    caller.join(timeout=10)
    assert not caller.is_alive()
    assert time.monotonic() - started < 5
    assert [type(item) for item in outcome] == [Ambiguous]


def test_another_process_can_make_the_fake_refuse_connections_for_a_while(fake):
    control = requests.Session()
    answer = control.post(f"{fake.base_url}/_fake/script", json={"refuse_seconds": 0.5}, timeout=5)
    assert answer.status_code == 200
    provider = make("image", fake.base_url)
    with pytest.raises(Transient):
        provider.generate(request("image"))

    def stats_answer() -> bool:
        try:
            return control.get(f"{fake.base_url}/_fake/stats", timeout=1).status_code == 200
        except requests.ConnectionError:
            return False

    wait_until(stats_answer)
    assert fake.calls_for("key-0001") == Calls(0, 0)


def test_a_delayed_answer_within_the_read_timeout_succeeds_and_counts_once(fake):
    fake.script(Behaviour("delay", seconds=0.2), Behaviour("delay", seconds=2, endpoint="audio"))
    assert make("image", fake.base_url).generate(request("image", "key-i")).media_type == "image/png"
    with pytest.raises(Ambiguous):
        make("audio", fake.base_url).generate(request("audio", "key-a"))
    assert (fake.calls_for("key-i"), fake.calls_for("key-a")) == (Calls(1, 1), Calls(1, 1))
