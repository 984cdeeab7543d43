"""Auth: API keys with roles, stored hashed; 401 and 403 on every API route; the key commands."""

from __future__ import annotations

import hashlib
import re

import pytest

from bin.commands import keys_main
from pipeline import keys
from pipeline.core.errors import InvalidInput


def api_routes(app) -> list[tuple[str, str]]:
    """(method, sample URL) of every API route that needs a key."""
    found = []
    for rule in app.url_map.iter_rules():
        if not rule.endpoint.startswith("api."):
            continue
        url = re.sub(r"<[^>]+>", "1", rule.rule)
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            found.append((method, url))
    return found


def test_every_api_route_answers_401_without_a_key(app, api):
    routes = api_routes(app)
    assert len(routes) >= 11
    for method, url in routes:
        if url == "/api/jobs":
            continue  # demo mode lets a keyless loopback call make demo jobs: see test_demo.py
        response = api.call(method, url, role=None, json={})
        assert response.status_code == 401, (method, url)
        assert response.json["error"]["code"] == "unauthorized"
        assert "X-API-Key" in response.json["error"]["message"]


def test_every_api_route_answers_401_for_an_unknown_key(app, api):
    for method, url in api_routes(app):
        response = api.call(method, url, role=None, headers={"X-API-Key": "mp_not-a-real-key"}, json={})
        assert response.status_code == 401, (method, url)


def test_a_revoked_key_is_refused(api, conn, tokens):
    assert api.get("/api/contents", role="editor").status_code == 200
    key_id = keys.authenticate(conn, tokens["editor"]).key_id
    keys.revoke(conn, key_id)
    assert api.get("/api/contents", role="editor").status_code == 401


@pytest.mark.parametrize("role, method, url", [
    ("reviewer", "POST", "/api/contents"),
    ("reviewer", "PUT", "/api/contents/1"),
    ("reviewer", "POST", "/api/tasks/1/retry"),
    ("reviewer", "POST", "/api/tasks/1/resolve"),
    ("reviewer", "POST", "/api/contents/1/versions/1/cancel"),
    ("reviewer", "POST", "/api/jobs"),
    ("editor", "POST", "/api/contents/1/versions/1/approve"),
])
def test_the_wrong_role_gets_403_naming_the_role_needed(api, role, method, url):
    response = api.call(method, url, role=role, json={})
    assert response.status_code == 403
    message = response.json["error"]["message"]
    assert response.json["error"]["code"] == "forbidden" and f"has the {role} role" in message


def test_every_role_but_delivery_may_read_and_admin_may_do_everything(api):
    for role in keys.ROLES:
        assert api.get("/api/contents", role=role).status_code == (403 if role == "delivery" else 200)
    assert api.post("/api/contents/1/versions/1/approve", role="admin").status_code == 404


def test_keys_are_stored_only_as_hashes_without_any_of_their_characters(conn, tokens):
    rows = conn.execute("SELECT * FROM api_keys").fetchall()
    hashes = {r["key_hash"] for r in rows}
    stored = " ".join(str(value) for row in rows for value in row.values())
    for token in tokens.values():
        assert hashlib.sha256(token.encode()).hexdigest() in hashes
        assert token[3:11] not in stored  # not even a prefix after the "mp_" marker


def test_a_key_with_a_bad_role_or_owner_is_refused(conn):
    with pytest.raises(InvalidInput):
        keys.create(conn, "someone", "root")
    with pytest.raises(InvalidInput):
        keys.create(conn, "  ", "editor")


def test_the_dev_stack_creates_one_admin_key_on_first_start_only(conn):
    token = keys.ensure_admin_key(conn, None)
    assert token and keys.authenticate(conn, token).role == "admin"
    assert keys.ensure_admin_key(conn, None) is None


def test_the_dev_stack_honours_lab_api_key_and_stores_it_hashed(conn):
    lab = "lab-key-0123456789abcdef-0123456789abcdef"
    assert keys.ensure_admin_key(conn, lab) is None
    assert keys.ensure_admin_key(conn, lab) is None  # a second start adds nothing
    principal = keys.authenticate(conn, lab)
    assert (principal.owner, principal.role) == ("lab", "admin")
    assert conn.execute("SELECT count(*) AS n FROM api_keys").fetchone()["n"] == 1
    stored = " ".join(str(value) for row in conn.execute("SELECT * FROM api_keys").fetchall() for value in row.values())
    assert lab[:8] not in stored  # neither the key nor its first characters
    # a revoked LAB_API_KEY stays revoked across restarts
    keys.revoke(conn, principal.key_id)
    assert keys.ensure_admin_key(conn, lab) is None
    assert keys.authenticate(conn, lab) is None


def test_the_keys_command_creates_lists_and_revokes(database_url, monkeypatch, capsys, conn):
    monkeypatch.setenv("DATABASE_URL", database_url)
    assert keys_main(["create", "--owner", "ann@example.com", "--role", "reviewer"]) == 0
    token = capsys.readouterr().out.strip().splitlines()[-1]
    principal = keys.authenticate(conn, token)
    assert (principal.owner, principal.role) == ("ann@example.com", "reviewer")
    assert keys_main(["list"]) == 0
    listing = capsys.readouterr().out
    assert "ann@example.com" in listing and token[3:8] not in listing and "live" in listing
    assert keys_main(["revoke", str(principal.key_id)]) == 0
    assert keys.authenticate(conn, token) is None
    assert keys_main(["revoke", str(principal.key_id)]) == 1
    assert "no live API key" in capsys.readouterr().err
