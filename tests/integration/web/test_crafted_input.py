"""Crafted input never gets a 500: every query and path parameter of every GET in the OpenAPI document, and of
the media and UI pages, fed any text Hypothesis makes (other scripts' digits, superscripts, newlines, NUL,
huge numbers, signs, spaces), answers with a 4xx or its usual answer."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from testkit.pages import sign_in
from testkit.webapp import make_app

pytestmark = pytest.mark.slow

# what breaks naive parsers: Unicode digits that isdigit() takes and int() may not, line breaks before $, NUL
TRICKY = st.sampled_from(["²", "٣", "１２", "1\n", "a%0A", "\n", "\x00", "-1", "+1", " 1", "1e3", "0x10", "9" * 40,
                          "1.5", "", "%", "..", "../..", "\u202e", "\ud7ff", "NaN", "Infinity", "true", "[]"])
VALUES = st.one_of(TRICKY, st.text(max_size=60), st.integers(min_value=-10**30, max_value=10**30).map(str))
SHA = "a" * 64


def get_operations(spec: dict) -> list[tuple[str, list[dict]]]:
    found = []
    for path, ops in spec["paths"].items():
        if "get" in ops and path not in ("/readyz", "/metrics"):
            found.append((path, ops["get"].get("parameters", [])))
    return found


@pytest.fixture
def app(database_url, redis_url, media_dir):
    return make_app(database_url, redis_url, media_dir, METRICS_TOKEN="t" * 40)


def test_every_parameter_of_every_api_read_survives_any_text(app, tokens):
    client = app.test_client()
    spec = client.get("/api/openapi.json").json
    operations = get_operations(spec)
    assert len(operations) >= 10

    @given(data=st.data())
    @settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(data) -> None:
        path, params = data.draw(st.sampled_from(operations))
        url, query = path, {}
        for param in params:
            value = data.draw(VALUES)
            if param["in"] == "path":
                url = url.replace("{" + param["name"] + "}", quote(value, safe="") or "1")
            elif param["in"] == "query" and data.draw(st.booleans()):
                query[param["name"]] = value
        url = url.replace("{sha256}", SHA)
        answer = client.get(url + ("?" + urlencode(query) if query else ""), headers={"X-API-Key": tokens["admin"]})
        assert answer.status_code < 500, (url, query, answer.status_code, answer.get_data(as_text=True)[:300])
    check()


@pytest.mark.parametrize("page", ["/", "/attention", "/spend"])
def test_the_pages_query_parameters_survive_any_text(app, tokens, page):
    client = app.test_client()
    sign_in(client, tokens["admin"])
    names = ["offset", "limit", "q", "content", "content_id", "problem", "kind", "next"]

    @given(name=st.sampled_from(names), value=VALUES)
    @settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(name, value) -> None:
        answer = client.get(f"{page}?{urlencode({name: value})}")
        assert answer.status_code < 500, (page, name, value, answer.status_code)
    check()


@given(name=st.sampled_from(["c", "v", "expires", "signature", "name"]), value=VALUES)
@settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck), database=None)
def test_a_media_links_parameters_survive_any_text(database_url, redis_url, tmp_path_factory, name, value):
    app = _media_app(database_url, redis_url, tmp_path_factory)
    base = {"c": "1", "v": "1", "expires": "99999999999", "signature": "0" * 64, "name": "lesson-v1"}
    answer = app.test_client().get(f"/media/{SHA}?{urlencode({**base, name: value})}")
    assert answer.status_code < 500, (name, value, answer.status_code)


_apps: dict = {}


def _media_app(database_url, redis_url, tmp_path_factory):
    if database_url not in _apps:
        _apps.clear()
        _apps[database_url] = make_app(database_url, redis_url, tmp_path_factory.mktemp("media"))
    return _apps[database_url]
