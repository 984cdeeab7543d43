"""The editors' pages through Flask's test client: read a page, find its forms and CSRF token, sign in, post a
form. Shared by the web tests that drive the pages."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class Forms(HTMLParser):
    """Every <form> of a page with its method, action and named inputs."""

    def __init__(self, html: str) -> None:
        super().__init__()
        self.forms: list[dict] = []
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"method": (attrs.get("method") or "get").lower(), "action": attrs.get("action"),
                               "inputs": {}})
        elif tag in ("input", "textarea", "select") and self.forms and attrs.get("name"):
            self.forms[-1]["inputs"][attrs["name"]] = attrs


def page(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, (url, response.status_code)
    return response.get_data(as_text=True)


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def sign_in(client, token: str) -> str:
    token_field = csrf_of(page(client, "/signin"))
    response = client.post("/signin", data={"api_key": token, "csrf_token": token_field})
    assert response.status_code == 303, response.get_data(as_text=True)
    fresh = csrf_of(page(client, "/"))
    assert fresh != token_field  # a new session gets a new token: a planted one is worthless
    return fresh


def post(client, csrf: str, url: str, **data):
    return client.post(url, data={"csrf_token": csrf, **data})
