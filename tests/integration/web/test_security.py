"""Safe to deploy: no default secret, server-side sessions, safe headers, private drafts with signed
delivery links, a tight demo door, bounded JSON, a guarded and bounded /metrics, no key prefixes,
per-key limits, and the deploy checklist. Each test names the promise it keeps (docs/security.md)."""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
import requests
from flask.sessions import SecureCookieSessionInterface

from bin import devstack
from bin.embedded import free_port
from pipeline import db, keys, settings as settings_mod
from pipeline.core.errors import ConfigError
from receipts.media import MediaStore
from testkit.helpers import lesson, wait_until
from testkit.pages import csrf_of, page, post, sign_in
from testkit.webapp import TEST_SECRET, Api, make_app
from web import create_app

ROOT = Path(__file__).resolve().parents[3]
OLD_PUBLIC_SECRET = "dev-only-secret-change-me"   # what pipeline/settings.py used to hold
HTTPS = {"X-Forwarded-Proto": "https"}


def count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


# -- 1. no default secret ---------------------------------------------------------------------

def test_the_web_app_refuses_to_start_without_a_secret_key_naming_it_and_how_to_make_one(database_url):
    with pytest.raises(ConfigError) as refused:
        create_app({"DATABASE_URL": database_url})
    assert "SECRET_KEY" in str(refused.value) and "secrets.token_urlsafe(48)" in str(refused.value)
    with pytest.raises(ConfigError, match="SECRET_KEY is too short .* at least 32"):
        create_app({"DATABASE_URL": database_url, "SECRET_KEY": "x" * 31})
    assert settings_mod.Settings().secret_key == ""


def test_no_secret_is_written_in_the_code():
    for folder in ("pipeline", "web", "bin"):
        for path in (ROOT / folder).rglob("*.py"):
            assert OLD_PUBLIC_SECRET not in path.read_text(), path


def test_a_production_start_without_secret_key_is_refused(database_url, redis_url, tmp_path):
    # the Procfile's web line, with everything but SECRET_KEY
    env = {k: v for k, v in os.environ.items() if k != "SECRET_KEY"}
    env.update(DATABASE_URL=database_url, REDIS_URL=redis_url, MEDIA_DIR=str(tmp_path), PYTHONPATH=str(ROOT))
    port = free_port()
    started = subprocess.run([sys.executable, "-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "1",
                              "web:create_app()"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert started.returncode != 0
    assert "SECRET_KEY is not set" in started.stderr and "secrets.token_urlsafe" in started.stderr


# -- 2. server-side sessions ---------------------------------------------------------------------

def forged_cookie(app, secret: str, key_id: int) -> str:
    """What Flask's signed-cookie session would accept for `key_id` if signed with `secret`."""
    app.secret_key = secret
    try:
        return SecureCookieSessionInterface().get_signing_serializer(app).dumps({"key_id": key_id, "csrf": "x"})
    finally:
        app.secret_key = None


@pytest.mark.parametrize("secret", [OLD_PUBLIC_SECRET, TEST_SECRET, "secret", ""])
def test_a_cookie_signed_with_any_secret_opens_nothing(app, conn, tokens, secret):
    admin = keys.authenticate(conn, tokens["admin"])
    client = app.test_client()
    value = forged_cookie(app, secret or "x", admin.key_id) if secret else "A" * 43
    client.set_cookie("mediapipe_session", value)
    response = client.get("/")
    assert response.status_code == 302 and response.headers["Location"].startswith("/signin")


def test_the_cookie_holds_a_random_token_and_the_table_only_its_hash(app, conn, tokens):
    client = app.test_client()
    sign_in(client, tokens["editor"])
    token = client.get_cookie("mediapipe_session").value
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", token)
    rows = conn.execute("SELECT token_hash, key_id FROM web_sessions").fetchall()
    assert [r["token_hash"] for r in rows] == [hashlib.sha256(token.encode()).hexdigest()]
    assert token not in str(rows)


def test_a_copied_cookie_is_refused_after_sign_out(app, tokens, conn):
    owner = app.test_client()
    csrf = sign_in(owner, tokens["admin"])
    thief = app.test_client()
    thief.set_cookie("mediapipe_session", owner.get_cookie("mediapipe_session").value)
    assert thief.get("/").status_code == 200
    assert post(owner, csrf, "/signout").status_code == 303
    assert thief.get("/").status_code == 302 and owner.get("/").status_code == 302
    assert count(conn, "web_sessions") == 0


def test_a_session_ends_after_the_idle_timeout_and_the_absolute_lifetime(database_url, redis_url, media_dir,
                                                                          tokens, conn):
    app = make_app(database_url, redis_url, media_dir, SESSION_IDLE_SECONDS="600", SESSION_MAX_SECONDS="7200")
    idle, old = app.test_client(), app.test_client()
    sign_in(idle, tokens["admin"])
    sign_in(old, tokens["editor"])
    row = conn.execute("SELECT extract(epoch FROM expires_at - created_at) AS life FROM web_sessions "
                       "LIMIT 1").fetchone()
    assert row["life"] == 7200
    conn.execute("UPDATE web_sessions SET seen_at = now() - interval '11 minutes' WHERE key_id = %s",
                 (keys.authenticate(conn, tokens["admin"]).key_id,))
    conn.execute("UPDATE web_sessions SET created_at = now() - interval '3 hours', "
                 "expires_at = now() - interval '1 second' WHERE key_id = %s",
                 (keys.authenticate(conn, tokens["editor"]).key_id,))
    assert idle.get("/").status_code == 302 and old.get("/").status_code == 302
    # a session in use stays alive: each request restarts the idle clock
    fresh = app.test_client()
    sign_in(fresh, tokens["reviewer"])
    conn.execute("UPDATE web_sessions SET seen_at = now() - interval '9 minutes'")
    assert fresh.get("/").status_code == 200 and fresh.get("/").status_code == 200


def test_revoking_a_key_deletes_its_sessions(app, tokens, conn):
    client = app.test_client()
    sign_in(client, tokens["editor"])
    keys.revoke(conn, keys.authenticate(conn, tokens["editor"]).key_id)
    assert count(conn, "web_sessions") == 0 and client.get("/").status_code == 302


def test_signing_in_again_replaces_the_session(app, tokens, conn):
    client = app.test_client()
    sign_in(client, tokens["editor"])
    first = client.get_cookie("mediapipe_session").value
    csrf = csrf_of(page(client, "/signin"))
    client.post("/signin", data={"api_key": tokens["admin"], "csrf_token": csrf})
    assert client.get_cookie("mediapipe_session").value != first and count(conn, "web_sessions") == 1


def test_over_https_behind_a_trusted_proxy_the_cookie_is_secure_with_the_host_prefix(
        database_url, redis_url, media_dir, tokens):
    app = make_app(database_url, redis_url, media_dir, TRUSTED_PROXIES="1")
    client = app.test_client()
    signin = client.get("/signin", headers=HTTPS)
    assert "Secure" in signin.headers["Set-Cookie"] and signin.headers["Set-Cookie"].startswith("__Host-")
    assert signin.headers["Strict-Transport-Security"].startswith("max-age=")
    response = client.post("/signin", headers=HTTPS, data={"api_key": tokens["editor"],
                                                           "csrf_token": csrf_of(signin.get_data(as_text=True))})
    cookie = response.headers["Set-Cookie"]
    assert cookie.startswith("__Host-mediapipe_session=")
    assert all(part in cookie for part in ("Secure", "HttpOnly", "Path=/", "SameSite=Lax")) and "Domain" not in cookie
    assert client.get("/", headers=HTTPS).status_code == 200


def test_forwarded_headers_are_ignored_unless_a_proxy_is_trusted(app, tokens):
    client = app.test_client()
    signin = client.get("/signin", headers=HTTPS)
    assert "Secure" not in signin.headers["Set-Cookie"] and "Strict-Transport-Security" not in signin.headers
    response = client.post("/signin", headers=HTTPS, data={"api_key": tokens["editor"],
                                                           "csrf_token": csrf_of(signin.get_data(as_text=True))})
    assert response.headers["Set-Cookie"].startswith("mediapipe_session=")


def test_the_sign_in_form_token_is_bound_to_this_browser(app, tokens):
    mine, theirs = app.test_client(), app.test_client()
    token = csrf_of(page(theirs, "/signin"))
    page(mine, "/signin")
    assert mine.post("/signin", data={"api_key": tokens["editor"], "csrf_token": token}).status_code == 400


# -- 3. headers on every answer ------------------------------------------------------------------

def ui_pages(app, cid: int, task_id: int) -> list[str]:
    urls = []
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("ui.") and "GET" in rule.methods:
            urls.append(re.sub(r"<id:content_id>", str(cid), re.sub(r"<id:task_id>", str(task_id),
                                                                      rule.rule.replace("<ver:version>", "1"))))
    return urls


def test_every_page_forbids_framing_and_foreign_content(app, api, tokens):
    created = api.create(1)
    task_id = api.get(created["status_url"]).json["tasks"][0]["id"]
    client = app.test_client()
    sign_in(client, tokens["admin"])
    pages = ui_pages(app, created["content_id"], task_id)
    assert len(pages) >= 9
    answers = [client.get(url) for url in pages + ["/nowhere", "/tasks/999999"]]
    answers += [app.test_client().get("/signin"), app.test_client().get("/"), client.get("/static/app.js"),
                api.get("/api/contents")]
    for response in answers:
        csp = response.headers.get("Content-Security-Policy", "")
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, response.request.path
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"
    assert sum(r.mimetype == "text/html" for r in answers) >= 11


def test_templates_hold_no_inline_script_style_or_handler():
    for path in (ROOT / "web" / "templates").glob("*.html"):
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"<style|\sstyle=|\son[a-z]+=|javascript:", text), path


# -- 4. private drafts, signed delivery links -----------------------------------------------------

@pytest.fixture
def asset(api, conn, media_dir) -> str:
    sha = MediaStore(media_dir).put(b"RIFF\x10\x00\x00\x00WEBPVP8 draft")
    db.execute(conn, "assets_upsert", {"sha256": sha, "media_type": "image/webp", "size": 20,
                                       "width": 1, "height": 1, "duration_ms": None})
    api.owned_asset(conn, sha)
    return sha


def test_a_drafts_media_needs_a_session_or_a_key(app, api, asset, tokens, conn):
    assert app.test_client().get(f"/media/{asset}").status_code == 401
    assert app.test_client().get(f"/media/{asset}", headers={"X-API-Key": "mp_wrong"}).status_code == 401
    keyed = api.get(f"/media/{asset}", role="editor")
    assert keyed.status_code == 200 and keyed.headers["Cache-Control"].startswith("private")
    client = app.test_client()
    sign_in(client, tokens["reviewer"])
    viewed = client.get(f"/media/{asset}")
    assert viewed.status_code == 200 and "public" not in viewed.headers["Cache-Control"]
    keys.revoke(conn, keys.authenticate(conn, tokens["editor"]).key_id)
    assert api.get(f"/media/{asset}", role="editor").status_code == 401
    assert client.get("/media/" + "0" * 64).status_code == 404


# the signed links themselves: tests/integration/web/test_delivery_links.py


def test_the_manifest_links_expire_after_the_configured_ttl(database_url, redis_url, media_dir, tokens, work):
    app = make_app(database_url, redis_url, media_dir, MEDIA_URL_TTL_SECONDS="600")
    _, manifest = Api(app.test_client(), tokens).delivered(work)
    expires = int(re.search(r"expires=(\d+)", manifest["bundle"]["url"]).group(1))
    assert 600 <= expires - time.time() <= 660
    assert app.test_client().get(manifest["blocks"][0]["image"]["url"]).status_code == 200
    # the board's own links stay private
    assert app.test_client().get(f"/media/{manifest['bundle']['sha256']}").status_code == 401


# -- 5. the demo door ------------------------------------------------------------------------------

SEED = {"theme": "校园生活", "scenario": "media_timeout"}


@pytest.mark.parametrize("headers, environ, why", [
    ({"Content-Type": "text/plain"}, {}, "a body any web page can post cross-site"),
    ({"Content-Type": "application/x-www-form-urlencoded"}, {}, "a form post"),
    ({"X-Forwarded-For": "203.0.113.9"}, {}, "a proxy"),
    ({"X-Real-IP": "203.0.113.9"}, {}, "a proxy"),
    ({"Forwarded": "for=203.0.113.9"}, {}, "a proxy"),
    ({"Host": "evil.example"}, {}, "DNS rebinding"),
    ({"Host": "127.0.0.1.evil.example:8000"}, {}, "DNS rebinding"),
    ({}, {"REMOTE_ADDR": "203.0.113.9"}, "another machine"),
])
def test_the_demo_door_stays_shut(app, conn, headers, environ, why):
    import json
    sent = {"Content-Type": "application/json", **headers}
    response = app.test_client().post("/api/jobs", data=json.dumps(SEED), headers=sent, environ_base=environ)
    assert response.status_code == 401, why
    assert count(conn, "contents") == 0


@pytest.mark.parametrize("host, peer", [("localhost", "127.0.0.1"), ("127.0.0.1:8000", "127.0.0.1"),
                                        ("[::1]:8000", "::1"), ("localhost:8000", "::ffff:127.0.0.1")])
def test_the_demo_door_opens_for_json_from_this_machine(app, host, peer):
    response = app.test_client().post("/api/jobs", json=SEED, headers={"Host": host},
                                      environ_base={"REMOTE_ADDR": peer})
    assert response.status_code == 202


def test_the_readme_seed_call_works_over_a_real_socket(server):
    url = f"{server}/api/jobs"
    assert requests.post(url, json=SEED, timeout=10).status_code == 202
    assert requests.post(url, data=str(SEED).encode(), headers={"Content-Type": "text/plain"},
                         timeout=10).status_code == 401


# -- 6. JSON depth -----------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b"[" * 100_000,
                                  b'{"a":' * 40 + b"1" + b"}" * 40, b'{"title": ' + b"[" * 33 + b"]" * 33 + b"}"])
@pytest.mark.parametrize("method, url, role", [("POST", "/api/contents", "editor"), ("PUT", "/api/contents/1", "editor"),
                                               ("POST", "/api/jobs", None), ("POST", "/api/tasks/1/retry", "editor")])
def test_too_deep_json_is_a_400_never_a_500(api, conn, body, method, url, role):
    if "/1" in url:   # a route that names a content or task looks it up first (missing: 404): let it exist
        api.create(1)
    before = count(conn, "versions")
    response = api.call(method, url, role=role, data=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 400
    assert response.json["error"]["code"] == "json_too_deep" and "nested too deeply" in response.json["error"]["message"]
    assert count(conn, "versions") == before


def test_json_within_the_depth_limit_is_read(api):
    # a block's regeneration mark is the one field that takes any JSON (reads show it; a save ignores it)
    body = lesson(1)
    body["blocks"][0]["regeneration"] = {"image": [[[[[[[[{"deep": True}]]]]]]]]}
    assert api.post("/api/contents", json=body, role="editor").status_code == 202


# -- 7. /metrics ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("headers, environ", [({"X-Forwarded-For": "203.0.113.9"}, {}), ({"Host": "metrics.example"}, {}),
                                              ({}, {"REMOTE_ADDR": "10.0.0.8"}), ({"X-Real-IP": "10.0.0.8"}, {})])
def test_metrics_without_a_token_answer_only_this_machine(app, headers, environ):
    client = app.test_client()
    assert client.get("/metrics").status_code == 200
    response = client.get("/metrics", headers=headers, environ_base=environ)
    assert response.status_code == 403 and "METRICS_TOKEN" in response.json["error"]["message"]


def test_metrics_with_a_token_need_it_from_everywhere(database_url, redis_url, media_dir):
    token = "metrics-token-" + "m" * 30
    client = make_app(database_url, redis_url, media_dir, METRICS_TOKEN=token).test_client()
    missing = client.get("/metrics")
    assert missing.status_code == 401 and missing.headers["WWW-Authenticate"].startswith("Bearer")
    assert client.get("/metrics", headers={"Authorization": f"Bearer {token}x"}).status_code == 401
    assert client.get("/metrics", headers={"Authorization": f"Basic {token}"}).status_code == 401
    remote = client.get("/metrics", headers={"Authorization": f"Bearer {token}"},
                        environ_base={"REMOTE_ADDR": "10.0.0.8"})
    assert remote.status_code == 200 and b"mediapipe_tasks" in remote.data


def scrape(client) -> str:
    response = client.get("/metrics")
    assert response.status_code == 200
    return response.get_data(as_text=True)


def sample(text: str, name: str) -> float:
    return float(re.search(rf"^{re.escape(name)} (\S+)$", text, re.M).group(1))


def test_metrics_read_counters_not_the_event_history_or_the_ledger(app, api, conn, database_url):
    created = api.create(1)
    task = api.get(created["status_url"]).json["tasks"][0]["id"]
    # written by another connection that then ends: its counter rows are folded into one at the next scrape
    with psycopg.connect(database_url, autocommit=True) as other:
        other_pid = other.info.backend_pid
        other.execute("INSERT INTO events (task_id, content_id, action, from_status, to_status, actor) "
                      "VALUES (%s, %s, 'transition', 'running', 'retry', 'test')", (task, created["content_id"]))
        other.execute("INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, cost) "
                      "VALUES (%s, 1, 'local-image', 'm', 'k', 'succeeded', 0.25)", (task,))
    wait_until(lambda: not conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (other_pid,)).fetchone(),
               message="the other backend ending")
    client = app.test_client()
    text = scrape(client)
    assert sample(text, "mediapipe_task_retries_total") == 1
    assert sample(text, 'mediapipe_provider_cost_total{outcome="succeeded",provider="local-image"}') == 0.25
    assert conn.execute("SELECT count(*) AS n FROM metric_counters WHERE shard <> 0 AND shard NOT IN "
                        "(SELECT pid FROM pg_stat_activity)").fetchone()["n"] == 0
    # the history is not read at scrape time: without it, the numbers stay
    conn.execute("DELETE FROM events")
    conn.execute("DELETE FROM provider_calls")
    text = scrape(client)
    assert sample(text, "mediapipe_task_retries_total") == 1
    assert sample(text, 'mediapipe_provider_calls_total{outcome="succeeded",provider="local-image"}') == 1
    for name in ("metrics_tasks_by_status", "metrics_snapshot", "metrics_calls_by_outcome"):
        sql = db.queries()[name]
        assert not re.search(r"\b(FROM|JOIN)\s+(events|provider_calls)\b", sql), name
        assert "status IN ('ready', 'running', 'retry', 'unknown')" in sql or name != "metrics_tasks_by_status"


# -- 8. keys -------------------------------------------------------------------------------------------

def test_no_key_prefix_is_stored_and_lab_api_key_needs_32_characters(conn):
    columns = {r["column_name"] for r in conn.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = 'api_keys'")}
    assert columns == {"id", "owner", "role", "team", "key_hash", "created_at", "revoked_at"}
    with pytest.raises(ConfigError, match="LAB_API_KEY is too short"):
        settings_mod.load({"LAB_API_KEY": "lab-key-0123456789abcdef"})


def test_bin_dev_makes_and_keeps_its_own_secrets(tmp_path, monkeypatch):
    monkeypatch.setattr(devstack, "DATA", tmp_path)
    env: dict[str, str] = {}
    devstack._dev_secrets(env)
    assert len(env["SECRET_KEY"]) >= 32 and len(env["LAB_API_KEY"]) >= 32
    for name in ("secret-key", "lab-api-key"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o600
    again: dict[str, str] = {}
    devstack._dev_secrets(again)
    assert again == env
    given = {"SECRET_KEY": "s" * 40, "LAB_API_KEY": "l" * 40}
    devstack._dev_secrets(given)
    assert given == {"SECRET_KEY": "s" * 40, "LAB_API_KEY": "l" * 40}
    settings_mod.load(env)  # both are valid settings


# -- 9. per-key limits -------------------------------------------------------------------------------

def written(conn) -> tuple[int, ...]:
    return tuple(count(conn, t) for t in ("contents", "versions", "tasks", "outbox", "events"))


def test_saves_per_minute_per_key_are_limited_with_429_and_nothing_written(database_url, redis_url, media_dir,
                                                                           tokens, conn):
    app = make_app(database_url, redis_url, media_dir, KEY_SAVES_PER_MINUTE="2")
    api = Api(app.test_client(), tokens)
    api.create(1)
    api.create(1)
    before = written(conn)
    refused = api.post("/api/contents", json=lesson(1), role="editor")
    assert refused.status_code == 429 and refused.json["error"]["code"] == "key_limit_reached"
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert written(conn) == before
    # the demo door (its own bucket) and other keys are not affected
    assert api.post("/api/contents", json=lesson(1), role="admin").status_code == 202
    assert app.test_client().post("/api/jobs", json={"theme": "旅行"}).status_code == 202
    # an idempotent replay is no new save
    conn.execute("UPDATE versions SET saved_at = saved_at - interval '2 minutes'")
    first = api.post("/api/contents", json=lesson(1), role="editor", headers={"Idempotency-Key": "k1"})
    assert first.status_code == 202
    again = api.post("/api/contents", json=lesson(1), role="editor", headers={"Idempotency-Key": "k1"})
    assert again.status_code == 202 and again.headers["Idempotent-Replayed"] == "true"


def test_pending_tasks_per_key_are_limited_with_429_and_nothing_written(database_url, redis_url, media_dir,
                                                                        tokens, conn, work):
    app = make_app(database_url, redis_url, media_dir, KEY_MAX_PENDING_TASKS="6")
    api = Api(app.test_client(), tokens)
    api.create(2)                                                   # 5 tasks pending
    before = written(conn)
    refused = api.post("/api/contents", json=lesson(2), role="editor")
    assert refused.status_code == 429 and int(refused.headers["Retry-After"]) >= 1
    assert "KEY_MAX_PENDING_TASKS" in refused.json["error"]["message"] and written(conn) == before
    assert api.post("/api/contents", json=lesson(2), role="reviewer").status_code == 403
    assert api.post("/api/contents", json=lesson(2), role="admin").status_code == 202
    # the UI's save of the same key is refused the same way
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    response = post(client, csrf, "/contents/new", title="t", locale="en-US", block_key=["b1", "b2"],
                    block_text=["x", "y"], block_prompt=["", ""])
    assert response.status_code == 429 and "KEY_MAX_PENDING_TASKS" in response.get_data(as_text=True)
    # once its work is done, the key saves again
    work.until_idle()
    assert api.post("/api/contents", json=lesson(2), role="editor").status_code == 202
    # one content bigger than the key's limit is bad input, not "wait"
    assert api.post("/api/contents", json=lesson(3), role="editor").status_code == 422


# -- 10. the deploy checklist ------------------------------------------------------------------------

def test_docs_security_has_the_deploy_checklist():
    text = (ROOT / "docs" / "security.md").read_text()
    for needed in ("TLS", "TRUSTED_PROXIES", "SECRET_KEY", "METRICS_TOKEN", "Redis", "PostgreSQL", "127.0.0.1",
                   "DEMO_MODE", "KEY_SAVES_PER_MINUTE", "MEDIA_URL_TTL_SECONDS", "SESSION_IDLE_SECONDS"):
        assert needed in text, needed
