"""Webhook rules without servers: signatures a Standard Webhooks receiver accepts, the retry schedule, the
addresses we refuse, and the thin payload (pipeline/core/webhooks.py)."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from pipeline.core import webhooks as rules
from pipeline.core.errors import InvalidInput

KEY = "unit-test-secret-key-0123456789abcdefghij"
NOW = datetime(2026, 12, 8, 12, 0, tzinfo=timezone.utc)


def test_a_message_signed_with_the_endpoint_secret_is_verified_by_the_reference_library():
    secret = rules.secret(KEY, "salt-1")
    body = b'{"type":"version.completed","data":{"team":"\xe5\xad\xa6"}}'
    sent = rules.headers("msg_7", int(time.time()), body, [secret])
    assert Webhook(secret).verify(body, sent) == json.loads(body)
    # a changed body, another endpoint's secret or another SECRET_KEY: refused
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body.replace(b"completed", b"withdrawn"), sent)
    for other in (rules.secret(KEY, "salt-2"), rules.secret(KEY + "x", "salt-1")):
        with pytest.raises(WebhookVerificationError):
            Webhook(other).verify(body, sent)


def test_during_a_rotation_a_message_carries_both_signatures_and_either_secret_verifies_it():
    old, new = rules.secret(KEY, "old"), rules.secret(KEY, "new")
    body = b"{}"
    sent = rules.headers("msg_1", int(time.time()), body, [new, old])
    assert sent["webhook-signature"].count("v1,") == 2
    for secret in (old, new):
        Webhook(secret).verify(body, sent)


def test_the_secret_is_whsec_and_32_bytes_and_never_the_salt_or_the_key():
    secret = rules.secret(KEY, "salt")
    assert secret.startswith("whsec_") and len(Webhook(secret)._whsecret) == 32
    assert "salt" not in secret and KEY not in secret


@pytest.mark.parametrize("status, outcome", [(200, "delivered"), (204, "delivered"), (299, "delivered"),
                                             (410, "gone"), (500, "retry"), (404, "retry"), (301, "retry"),
                                             (None, "retry")])
def test_a_2xx_is_delivered_a_410_is_gone_and_anything_else_is_tried_again(status, outcome):
    assert rules.decide(status, 1, NOW, NOW, rules.RetryPolicy(), 0.5).outcome == outcome


def test_retries_back_off_exponentially_capped_with_jitter_and_end_dead_after_the_window():
    policy = rules.RetryPolicy(base_seconds=5, cap_seconds=3600, window_seconds=3 * 86_400)
    assert [rules.backoff(n, policy, 0.0) for n in (1, 2, 3, 4)] == [2.5, 5, 10, 20]
    assert [rules.backoff(n, policy, 0.999999) for n in (1, 2)] == pytest.approx([5, 10])
    assert rules.backoff(30, policy, 0.0) == 1800 and rules.backoff(10_000, policy, 0.99) <= 3600
    # with the defaults (5 s doubling to 6 h), tried until the next try would fall past three days from the first,
    # then dead with the reason
    at, attempt = NOW, 0
    while (decided := rules.decide(500, attempt := attempt + 1, NOW, at, rules.RetryPolicy(), 0.5)).outcome == "retry":
        assert decided.available_at > at
        at = decided.available_at
    assert decided.outcome == "dead" and "3 days" in decided.reason
    assert NOW + timedelta(days=3) - timedelta(hours=6) < at <= NOW + timedelta(days=3)
    assert 20 < attempt < 35


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1", "::1",
                                     "fe80::1", "fc00::1", "100.64.0.1", "0.0.0.0", "224.0.0.1", "::ffff:10.0.0.1",
                                     "169.254.169.254"])
def test_addresses_that_are_not_public_are_refused(address):
    assert rules.address_refusal(address, ()) is not None


def test_allowed_networks_let_a_test_or_an_internal_deployment_in_but_never_a_metadata_service():
    allowed = rules.networks("127.0.0.0/8, 10.0.0.0/8,169.254.0.0/16")
    assert rules.address_refusal("127.0.0.1", allowed) is None and rules.address_refusal("10.9.9.9", allowed) is None
    assert "metadata" in rules.address_refusal("169.254.169.254", allowed)
    assert rules.address_refusal("93.184.215.14", ()) is None and rules.address_refusal("2606:4700::1", ()) is None


def test_a_url_is_https_or_http_to_this_machine_without_credentials_and_every_address_must_pass():
    allowed = ("127.0.0.0/8",)
    assert rules.vet(rules.target("http://127.0.0.1:9/h"), ["127.0.0.1"], allowed) == "127.0.0.1"
    assert rules.vet(rules.target("https://hooks.example/x?a=1"), ["93.184.215.14"], ()) == "93.184.215.14"
    assert rules.target("https://hooks.example/x?a=1").path == "/x?a=1"
    for url, addresses, words in [
            ("http://hooks.example/h", ["93.184.215.14"], "clear text"),
            ("https://rebind.example/h", ["93.184.215.14", "10.0.0.1"], "private"),
            ("https://user:pw@hooks.example/h", ["93.184.215.14"], "no user or password"),
            ("ftp://hooks.example/h", ["93.184.215.14"], r"not an http\(s\) URL"),
            ("https://hooks.example/h#x", ["93.184.215.14"], "fragment"),
            ("https://hooks.example:99999/h", ["93.184.215.14"], "not a URL")]:
        with pytest.raises(rules.UnsafeURL, match=words) as refused:
            rules.vet(rules.target(url), addresses, ())
        assert isinstance(refused.value, InvalidInput) and refused.value.field == "url"


def test_event_types_are_checked_and_none_means_all():
    assert rules.event_types(None) == list(rules.EVENT_TYPES)
    assert rules.event_types("version.withdrawn, version.completed") == ["version.completed", "version.withdrawn"]
    with pytest.raises(InvalidInput, match="unknown event type version.done"):
        rules.event_types(["version.done"])


def test_the_payload_is_thin_stable_and_carries_the_api_urls():
    event = {"id": 41, "type": "version.deliverable", "team": "physics", "content_id": 3, "version": 2,
             "task_id": None, "data": {}, "created_at": NOW}
    body = rules.payload(event, "https://media.example/")
    assert body == rules.payload(event, "https://media.example/")
    doc = json.loads(body)
    assert doc["type"] == "version.deliverable" and doc["timestamp"] == NOW.isoformat()
    assert doc["data"] == {"event_id": 41, "team": "physics", "content_id": 3, "version": 2, "urls": {
        "content": "https://media.example/api/contents/3", "version": "https://media.example/api/contents/3/versions/2",
        "delivery": "https://media.example/api/contents/3/delivery"}}
    assert b"signature" not in body and b"/media/" not in body
