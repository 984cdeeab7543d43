"""The admins' webhook pages: register an endpoint (its secret shown once, in that answer only), see its messages
and their attempts, send one again, rotate, disable; a private address is refused with the reason; no one else
sees the pages."""

from __future__ import annotations

import re

import pytest

from testkit.pages import page, post, sign_in
from testkit.receiver import Receiver, send_webhooks
from testkit.webapp import make_app

pytestmark = pytest.mark.server_major   # the message comes from a trigger of ours

ENV = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8", "WEBHOOK_BACKOFF_BASE_SECONDS": "0.1"}


@pytest.fixture
def admin(database_url, redis_url, media_dir, tokens):
    app = make_app(database_url, redis_url, media_dir, **ENV)
    client = app.test_client()
    return app, client, sign_in(client, tokens["admin"])


def register(client, csrf: str, **form):
    return client.post("/webhooks", data={"csrf_token": csrf, **form})


def test_an_admin_registers_an_endpoint_sees_its_secret_once_and_its_attempts(admin, conn):
    app, client, csrf = admin
    with Receiver() as receiver:
        added = register(client, csrf, url=receiver.url, team="default", events=["version.withdrawn"])
        assert added.status_code == 200
        html = added.get_data(as_text=True)
        receiver.secret = re.search(r"<code>(whsec_[A-Za-z0-9+/=]+)</code>", html).group(1)
        endpoint = int(re.search(r'action="/webhooks/(\d+)"', html).group(1))
        assert receiver.secret not in page(client, f"/webhooks/{endpoint}")   # shown once
        assert receiver.url in page(client, "/webhooks")
        # a withdrawn approval is told, verified, and the page shows the message and its attempt
        content = conn.execute("INSERT INTO contents (title, locale, current_version, approved_version) "
                               "VALUES ('t', 'zh-CN', 1, 1) RETURNING id").fetchone()["id"]
        conn.execute("UPDATE contents SET approved_version = NULL WHERE id = %s", (content,))
        send_webhooks(app.config["SETTINGS"])
        assert [m.verified for m in receiver.messages()] == [True]
        shown = page(client, f"/webhooks/{endpoint}")
        assert 'data-status="delivered"' in shown and "version.withdrawn" in shown
        delivery = int(re.search(r'data-delivery="(\d+)"', shown).group(1))
        # sent again on request, with the same webhook-id
        again = post(client, csrf, f"/webhooks/{endpoint}", action="send-again", delivery_id=str(delivery))
        assert again.status_code == 303
        send_webhooks(app.config["SETTINGS"])
        assert [m.webhook_id for m in receiver.messages()] == [f"msg_{delivery}"] * 2
        # rotated: a new secret in the answer; disabled: the page says so
        rotated = post(client, csrf, f"/webhooks/{endpoint}", action="rotate", overlap_hours="1")
        assert re.search(r"<code>whsec_", rotated.get_data(as_text=True))
        post(client, csrf, f"/webhooks/{endpoint}", action="disable")
        assert 'data-state="disabled"' in page(client, f"/webhooks/{endpoint}")


def test_a_private_address_is_refused_with_the_reason_and_nothing_is_registered(admin, conn):
    _, client, csrf = admin
    refused = register(client, csrf, url="https://192.168.1.20/hooks", team="default")
    assert refused.status_code == 422 and "private address" in refused.get_data(as_text=True)
    assert conn.execute("SELECT count(*) AS n FROM webhook_endpoints").fetchone()["n"] == 0


@pytest.mark.parametrize("role", ["editor", "reviewer"])
def test_only_admins_see_the_webhook_pages(app, tokens, role):
    client = app.test_client()
    csrf = sign_in(client, tokens[role])
    page(client, "/webhooks", 403)
    assert register(client, csrf, url="https://hooks.example/h", team="default").status_code == 403
    assert "/webhooks" not in page(client, "/")
