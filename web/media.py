"""`GET /media/<sha256>`: stored assets by content address.

Only a 64-character lowercase hex digest that the assets index knows is served; the
file path is derived from the digest by the media store, never taken from input.
Content never changes under a digest, so answers may be cached for a year.
"""

from __future__ import annotations

import re

from flask import Blueprint, Response, abort, send_file

from pipeline import db
from receipts.media import MediaStore
from web.db import get_conn, settings

bp = Blueprint("media", __name__)
_SHA = re.compile(r"^[0-9a-f]{64}$")
IMMUTABLE = "public, max-age=31536000, immutable"
EXTENSIONS = {"image/webp": "webp", "image/png": "png", "image/jpeg": "jpg", "audio/wav": "wav",
              "audio/mpeg": "mp3", "application/zip": "zip"}


@bp.get("/media/<string:sha256>")
def get(sha256: str) -> Response:
    if not _SHA.match(sha256):
        abort(404, description="no such media")
    asset = db.one(get_conn(), "assets_get", {"sha256": sha256})
    store = MediaStore(settings().media_dir)
    if asset is None or not store.has(sha256):
        abort(404, description="no such media")
    response = send_file(store.path(sha256), mimetype=asset["media_type"], conditional=True, etag=sha256,
                         max_age=31536000, download_name=f"{sha256[:16]}.{EXTENSIONS.get(asset['media_type'], 'bin')}",
                         as_attachment=asset["media_type"] == "application/zip")
    response.headers["Cache-Control"] = IMMUTABLE
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response
