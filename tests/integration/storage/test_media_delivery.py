"""`/media/<sha256>` on either kind of store: through the app, or (object storage with
MEDIA_DELIVERY=redirect) by a redirect to a short-lived presigned URL of the bucket, made only
after the app's own access check."""

from __future__ import annotations

import time
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from pipeline import db, keys, settings, storage, versions
from pipeline.db import connect
from pipeline.core.errors import ConfigError
from testkit.helpers import EDITOR, draft
from testkit.webapp import Api, make_app
from web.media import signed_url

PNG = b"\x89PNG\r\n\x1a\n" + b"pixels" * 100


@pytest.fixture
def conn(database_url):
    with connect(database_url, autocommit=True) as c:
        yield c


@pytest.fixture
def reader(conn) -> str:
    return keys.create(conn, "reviewer@example.com", "reviewer")[1]


def put_asset(conn, cfg, data: bytes = PNG, media_type: str = "image/png") -> str:
    """An asset written by some worker into the shared store and indexed in the database."""
    sha = storage.media_store(cfg).put(data)
    db.execute(conn, "assets_upsert", {"sha256": sha, "media_type": media_type, "size": len(data),
                                       "width": 1, "height": 1, "duration_ms": None})
    return sha


def owned(app, conn, sha: str) -> None:
    """The asset is the medium of a content of the reader's team (a reader sees media through its team's contents)."""
    editor = keys.create(conn, "editor@example.com", "editor")[1]
    Api(app.test_client(), {"editor": editor}).owned_asset(conn, sha)


def test_the_app_serves_a_stored_asset_to_a_reader_with_private_caching(database_url, redis_url, tmp_path, conn,
                                                                          reader, storage_env):
    app = make_app(database_url, redis_url, tmp_path / "web-media", **storage_env)
    worker_cfg = settings.load({**storage_env, "MEDIA_DIR": str(tmp_path / ("web-media" if not storage_env
                                                                              else "worker-media"))})
    sha = put_asset(conn, worker_cfg)
    owned(app, conn, sha)
    client = app.test_client()
    response = client.get(f"/media/{sha}", headers={"X-API-Key": reader})
    assert response.status_code == 200 and response.data == PNG and response.mimetype == "image/png"
    assert response.headers["Cache-Control"].startswith("private")
    assert response.headers["ETag"].strip('"') == sha
    assert client.get(f"/media/{sha}", headers={"X-API-Key": reader, "If-None-Match": f'"{sha}"'}).status_code == 304
    assert client.get(f"/media/{sha}").status_code == 401
    storage.media_store(worker_cfg).delete(sha)
    assert client.get(f"/media/{sha}", headers={"X-API-Key": reader}).status_code == 404


def test_with_redirect_delivery_a_reader_goes_to_a_short_lived_presigned_url(database_url, redis_url, tmp_path,
                                                                             conn, reader, s3_env):
    app = make_app(database_url, redis_url, tmp_path / "media", MEDIA_DELIVERY="redirect",
                   MEDIA_REDIRECT_SECONDS="120", **s3_env)
    sha = put_asset(conn, app.config["SETTINGS"])
    owned(app, conn, sha)
    client = app.test_client()
    # no credentials: refused by the app, no URL handed out
    refused = client.get(f"/media/{sha}")
    assert refused.status_code == 401 and "Location" not in refused.headers
    answer = client.get(f"/media/{sha}", headers={"X-API-Key": reader})
    assert answer.status_code == 302 and answer.headers["Cache-Control"] == "no-store"
    location = answer.headers["Location"]
    assert location.startswith(s3_env["S3_ENDPOINT_URL"])
    assert parse_qs(urlsplit(location).query)["X-Amz-Expires"] == ["120"]
    fetched = requests.get(location, timeout=10)
    assert fetched.status_code == 200 and fetched.content == PNG
    assert fetched.headers["Content-Type"] == "image/png"
    assert fetched.headers["Cache-Control"].startswith("private")
    # the presigned URL is the only way in: the bucket refuses the same object without a signature
    assert requests.get(location.split("?")[0], timeout=10).status_code == 403


def test_a_signed_delivery_link_redirects_too_and_an_invalid_one_does_not(database_url, redis_url, tmp_path, conn,
                                                                          s3_env):
    app = make_app(database_url, redis_url, tmp_path / "media", MEDIA_DELIVERY="redirect", **s3_env)
    sha = put_asset(conn, app.config["SETTINGS"], b"PK\x03\x04 a bundle", "application/zip")
    # a link is issued for an approved version: a saved one, marked approved as a reviewer would
    saved = versions.save(conn, draft(1), app.config["SETTINGS"], by=EDITOR)
    conn.execute("UPDATE contents SET approved_version = 1 WHERE id = %s", (saved.content_id,))
    with app.test_request_context():
        link = signed_url(sha, int(time.time()) + 600, saved.content_id, 1)
    client = app.test_client()
    answer = client.get(link)
    assert answer.status_code == 302
    fetched = requests.get(answer.headers["Location"], timeout=10)
    assert fetched.content == b"PK\x03\x04 a bundle"
    assert fetched.headers["Cache-Control"] == "private, no-cache"   # the bucket answers as the app would
    assert fetched.headers["Content-Disposition"].startswith("attachment")
    tampered = client.get(link[:-4] + ("0000" if not link.endswith("0000") else "1111"))
    assert tampered.status_code == 403 and "Location" not in tampered.headers


@pytest.mark.parametrize("env, named", [
    ({"STORAGE": "s3"}, "S3_BUCKET"),
    ({"STORAGE": "s3", "S3_BUCKET": "Not_A_Bucket"}, "S3_BUCKET"),
    ({"STORAGE": "s3", "S3_BUCKET": "media", "S3_PREFIX": "/abs/"}, "S3_PREFIX"),
    ({"STORAGE": "s3", "S3_BUCKET": "media", "S3_ACCESS_KEY_ID": "only-one"}, "S3_SECRET_ACCESS_KEY"),
    ({"STORAGE": "s3", "S3_BUCKET": "media", "S3_ENDPOINT_URL": "ftp://x"}, "S3_ENDPOINT_URL"),
    ({"MEDIA_DELIVERY": "redirect"}, "STORAGE=s3"),
    ({"STORAGE": "gcs"}, "STORAGE"),
])
def test_storage_settings_that_cannot_work_are_refused_naming_the_variable(env, named):
    with pytest.raises(ConfigError, match=named):
        settings.load(env)


def test_without_storage_settings_media_stay_in_media_dir(tmp_path):
    cfg = settings.load({"MEDIA_DIR": str(tmp_path / "m")})
    sha = storage.media_store(cfg).put(b"local")
    assert cfg.storage.backend == "local" and (tmp_path / "m" / "assets" / sha[:2] / sha).read_bytes() == b"local"
