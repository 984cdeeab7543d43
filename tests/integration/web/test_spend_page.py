"""The spend page's figures agree with each other: a provider's calls today are the ledger's paid calls, whatever it
booked against a budget (a free provider books nothing)."""

from __future__ import annotations

import re

from pipeline import runtime
from testkit.pages import page, sign_in
from testkit.webapp import api_and_work, make_app


def test_each_providers_paid_calls_today_add_up_to_the_pages_paid_calls(database_url, redis_url, media_dir, tokens):
    # given: real local providers (free: nothing is booked against a budget) made a two-block lesson
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, providers=True)
    api.create(2)
    work.until_idle()
    # when
    doc = api.get("/api/spend").json
    client = make_app(database_url, redis_url, media_dir).test_client()
    sign_in(client, tokens["admin"])
    html = page(client, "/spend")
    # then: four paid calls, two per provider, in the API and on the page's two tables alike
    assert doc["totals"]["paid_calls"] == 4
    assert {p["provider"]: p["paid_calls_today"] for p in doc["providers"]} == {"local-image": 2, "local-tts": 2}
    rows = re.findall(r'<tr data-provider="([^"]+)"><td>[^<]+</td><td>(\d+)</td>', html)
    assert rows == [("local-image", "2"), ("local-tts", "2")]
    assert "<strong>4</strong> paid calls" in html
    runtime.install(None)
