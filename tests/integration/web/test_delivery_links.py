"""Signed delivery links: they serve without a key while their version is the approved one and until they
expire; a tampered link is 403, a link whose approval was withdrawn or replaced is 410; by default no shared
cache keeps what they serve."""

from __future__ import annotations

import hashlib
import re

import pytest

from testkit.webapp import Api, make_app


@pytest.fixture
def delivered(api, work) -> dict:
    created, manifest = api.delivered(work)
    return {"created": created, "manifest": manifest, "url": manifest["blocks"][0]["image"]["url"]}


def test_a_link_serves_without_a_key_privately_until_it_expires(app, delivered, monkeypatch):
    client = app.test_client()
    response = client.get(delivered["url"])
    assert response.status_code == 200
    assert response.headers["Cache-Control"] == "private, no-cache"   # no shared cache; a browser asks each time
    again = client.get(delivered["url"], headers={"If-None-Match": response.headers["ETag"]})
    assert again.status_code == 304
    expires = int(re.search(r"expires=(\d+)", delivered["url"]).group(1))
    monkeypatch.setattr("web.media.time.time", lambda: expires + 1)
    expired = client.get(delivered["url"])
    assert expired.status_code == 403 and expired.json["error"]["code"] == "link_expired"


def test_an_operator_may_let_caches_keep_delivered_media(database_url, redis_url, media_dir, tokens, work):
    app = make_app(database_url, redis_url, media_dir, MEDIA_LINK_CACHE="public")
    _, manifest = Api(app.test_client(), tokens).delivered(work)
    url = manifest["bundle"]["url"]
    cache = app.test_client().get(url).headers["Cache-Control"]
    assert cache.startswith("public, max-age=") and cache.endswith("immutable")


@pytest.mark.parametrize("tamper", ["signature", "expires", "sha256", "content", "version", "secret"])
def test_a_tampered_link_is_refused(delivered, database_url, redis_url, media_dir, app, tamper):
    url = delivered["url"]
    if tamper == "signature":
        url = url[:-1] + ("0" if url[-1] != "0" else "1")
    elif tamper == "expires":
        url = re.sub(r"expires=(\d+)", lambda m: f"expires={int(m.group(1)) + 3600}", url)
    elif tamper == "sha256":
        url = re.sub(r"/media/[0-9a-f]{64}", "/media/" + hashlib.sha256(b"another asset").hexdigest(), url)
    elif tamper == "content":
        url = re.sub(r"([?&])c=(\d+)", lambda m: f"{m.group(1)}c={int(m.group(2)) + 1}", url)
    elif tamper == "version":
        url = re.sub(r"([?&])v=(\d+)", lambda m: f"{m.group(1)}v={int(m.group(2)) + 1}", url)
    else:
        app = make_app(database_url, redis_url, media_dir, SECRET_KEY="another-secret-" + "x" * 32)
    response = app.test_client().get(url)
    assert response.status_code == 403 and response.json["error"]["code"] == "invalid_link"


def test_a_withdrawn_approval_ends_its_links_at_once(app, api, delivered):
    created = delivered["created"]
    withdrawn = api.post(created["status_url"] + "/withdraw", role="reviewer", json={"note": "wrong picture"})
    assert withdrawn.status_code == 200
    for url in (delivered["url"], delivered["manifest"]["bundle"]["url"]):
        gone = app.test_client().get(url)
        assert gone.status_code == 410 and gone.json["error"]["code"] == "link_withdrawn"
    # approved again, the same link serves again: it names the version, and that version is approved
    assert api.approve(created, role="reviewer").status_code == 200
    assert app.test_client().get(delivered["url"]).status_code == 200


def test_a_newer_approved_version_ends_the_older_versions_links(app, api, work, delivered):
    created = delivered["created"]
    content = api.get(created["content_url"]).json
    blocks = [{**b, "text": b["text"] + "（新）"} for b in content["blocks"]]
    second = api.put(created["content_url"], role="editor", json={
        "title": content["title"], "locale": content["locale"], "blocks": blocks, "base_version": 1}).json
    work.until_idle()
    assert api.approve(second, role="reviewer").status_code == 200
    gone = app.test_client().get(delivered["url"])
    assert gone.status_code == 410 and "version 1" in gone.json["error"]["message"]


@pytest.mark.parametrize("name, status", [
    # longer than the document allows: 422 naming it; not a name we make: 404
    ("a" * 121, 422), ("a%0D%0AX-Evil:%201", 404), ("%00", 404), ("a/b", 404), ("a%20b", 404), ("a%0A", 404),
    ("." * 3, 404)])
def test_a_crafted_download_name_is_refused_never_a_500(app, delivered, name, status):
    url = delivered["manifest"]["bundle"]["url"]
    crafted = re.sub(r"&name=[^&]*", "", url) + f"&name={name}"
    answer = app.test_client().get(crafted)
    assert answer.status_code == status
    assert answer.json["error"].get("field") == ("name" if status == 422 else None)
