"""`/media/<sha256>`: stored assets for callers allowed to see them, with their media type; 404 for
anything else. Drafts need a key or a session (private cache); signed delivery links need neither."""

from __future__ import annotations

import pytest

from pipeline import db
from receipts.media import MediaStore


@pytest.fixture
def stored(api, conn, media_dir):
    """A WebP-typed asset on disk and in the index, the medium of a content of the keys' team."""
    data = b"RIFF\x10\x00\x00\x00WEBPVP8 fake"
    sha = MediaStore(media_dir).put(data)
    db.execute(conn, "assets_upsert", {"sha256": sha, "media_type": "image/webp", "size": len(data),
                                       "width": 1, "height": 1, "duration_ms": None})
    api.owned_asset(conn, sha)
    return sha, data


def test_a_stored_asset_is_served_to_a_key_with_its_type_and_private_caching(api, stored):
    sha, data = stored
    response = api.get(f"/media/{sha}", role="reviewer")
    assert response.status_code == 200 and response.data == data
    assert response.mimetype == "image/webp"
    assert response.headers["Cache-Control"].startswith("private")
    assert response.headers["ETag"].strip('"') == sha
    assert response.headers["X-Content-Type-Options"] == "nosniff"


def test_a_revalidation_with_the_etag_is_304(api, stored):
    sha, _ = stored
    assert api.get(f"/media/{sha}", headers={"If-None-Match": f'"{sha}"'}).status_code == 304


def test_an_asset_the_index_knows_but_the_disk_lost_is_404(api, stored, media_dir):
    sha, _ = stored
    MediaStore(media_dir).delete(sha)
    assert api.get(f"/media/{sha}").status_code == 404


def test_a_file_on_disk_that_the_index_does_not_know_is_404(api, media_dir):
    sha = MediaStore(media_dir).put(b"not indexed")
    assert api.get(f"/media/{sha}").status_code == 404


@pytest.mark.parametrize("path", [
    "/media/" + "0" * 64, "/media/" + "A" * 64, "/media/abc", "/media/" + "0" * 65,
    "/media/../../etc/passwd", "/media/..%2f..%2fetc%2fpasswd", "/media/%2e%2e/%2e%2e/etc/passwd",
    "/media/receipts", "/media/assets/00/" + "0" * 64, "/media/" + "0" * 63 + "/", "/media/",
])
def test_anything_else_is_404(api, stored, path):
    assert api.get(path).status_code == 404
