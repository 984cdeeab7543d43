"""`GET /media/<sha256>`: stored assets by content address, for callers allowed to see them.

Only a 64-character lowercase hex digest that the assets index knows is served; the
file path is derived from the digest by the media store, never taken from input.

Drafts are private: an asset is served to a signed-in UI session or an `X-API-Key` with
read access, marked `Cache-Control: private`. The delivery manifest of an approved version
hands out signed links instead (`?expires=<unix time>&signature=<hex>`, an HMAC-SHA256 of
the digest and the expiry under a key derived from SECRET_KEY, valid MEDIA_URL_TTL_SECONDS),
so the app that consumes a delivery needs no key; those answers may be cached publicly
until the link expires. Content never changes under a digest, so the ETag is the digest.

With object storage (STORAGE=s3) the app streams the object from the bucket, or, with
MEDIA_DELIVERY=redirect, answers 302 to a presigned URL of the bucket that expires after
MEDIA_REDIRECT_SECONDS; the redirect is made only after the same checks, is itself never
cached, and the URL makes the bucket answer with the same Cache-Control the app would.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import time
from datetime import datetime, timezone
from urllib.parse import urlencode

from flask import Blueprint, Response, abort, redirect, request, send_file, url_for

from pipeline import db, storage
from pipeline.core.content import download_name as content_download_name
from pipeline.core.records import content_disposition, extension
from web.auth import HEADER, api_principal, session_principal
from web.db import get_conn, settings
from web.errors import Problem

bp = Blueprint("media", __name__)
_SHA = re.compile(r"^[0-9a-f]{64}$")
_EXPIRES = re.compile(r"^[0-9]{1,12}$")
PRIVATE = "private, max-age=3600"


def _mac(sha256: str, expires: int) -> str:
    key = hmac.new(settings().secret_key.encode(), b"mediapipe media link v1", hashlib.sha256).digest()
    return hmac.new(key, f"{sha256}:{expires}".encode(), hashlib.sha256).hexdigest()


def link_expiry(now: float | None = None) -> int:
    """When links made now expire: TTL from now, rounded up to the minute so links stay stable for a minute."""
    now = time.time() if now is None else now
    return math.ceil((now + settings().media_url_ttl_seconds) / 60) * 60


def signed_url(sha256: str, expires: int) -> str:
    return url_for("media.get", sha256=sha256, expires=expires, signature=_mac(sha256, expires))


def _signed_link_age() -> int | None:
    """Seconds the request's signed link stays valid; None without one; 403 for a bad or expired link."""
    expires, signature = request.args.get("expires"), request.args.get("signature")
    if expires is None and signature is None:
        return None
    sha256 = request.view_args["sha256"]
    if not expires or not signature or not _EXPIRES.match(expires) \
            or not hmac.compare_digest(signature.encode(), _mac(sha256, int(expires)).encode()):
        raise Problem(403, "invalid_link", "this media link is not valid; take the links of a fresh delivery manifest")
    left = int(expires) - int(time.time())
    if left <= 0:
        raise Problem(403, "link_expired", "this media link has expired; fetch the delivery manifest again for "
                                           "fresh links")
    return left


def _may_read() -> None:
    """A signed-in UI session, or an API key with read access (401 without either, 403 without read)."""
    if request.headers.get(HEADER):
        api_principal("read")
    elif session_principal() is None:
        raise Problem(401, "unauthorized", f"media of drafts needs a signed-in session or an API key in the "
                                           f"{HEADER} header; delivered media come with signed links")


@bp.get("/media/<string:sha256>")
def get(sha256: str) -> Response:
    if not _SHA.match(sha256):
        abort(404, description="no such media")
    left = _signed_link_age()
    if left is None:
        _may_read()
    asset = db.one(get_conn(), "assets_get", {"sha256": sha256})
    if asset is None or not storage.has_asset(settings(), sha256):
        abort(404, description="no such media")
    cache = PRIVATE if left is None else f"public, max-age={left}, immutable"
    name = download_name(asset["media_type"]) or f"{sha256[:16]}.{extension(asset['media_type'])}"
    attach = asset["media_type"] == "application/zip"
    url = storage.presigned_asset_url(settings(), sha256, media_type=asset["media_type"], cache_control=cache,
                                      download_name=name if attach else None)
    if url is not None:
        response = redirect(url, 302)
        response.headers["Cache-Control"] = "no-store"
        return response
    response = _send(sha256, asset, name, attach)
    response.headers["Cache-Control"] = cache
    response.headers["X-Content-Type-Options"] = "nosniff"
    if left is None:
        response.vary.add("Cookie")
        response.vary.add(HEADER)
    return response


_NAME = re.compile(r"^[\w.-]{1,120}$")


def download_name(media_type: str) -> str | None:
    """The `name` a link asks the file to be saved as (`<title>-v<version>.zip`, pipeline.core.content.download_name):
    only letters, digits, '.', '-' and '_'; the extension is always the asset's own. None without one, 404 otherwise."""
    name = request.args.get("name")
    if name is None:
        return None
    if not _NAME.match(name) or name.startswith("."):
        abort(404, description="no such media")
    return f"{name.rsplit('.', 1)[0]}.{extension(media_type)}"


def _send(sha256: str, asset: dict, name: str, attach: bool) -> Response:
    """The asset's bytes: a local file, or the object streamed from the bucket in pieces."""
    path = storage.asset_file(settings(), sha256)
    if path is not None:
        return send_file(path, mimetype=asset["media_type"], conditional=True, etag=sha256, download_name=name,
                         as_attachment=attach)
    if request.if_none_match.contains(sha256):   # answered before the bucket is asked for the bytes
        response = Response(status=304)
        response.set_etag(sha256)
        return response
    chunks = storage.asset_chunks(settings(), sha256)
    if chunks is None:
        abort(404, description="no such media")
    response = Response(chunks, mimetype=asset["media_type"], direct_passthrough=True)
    response.content_length = asset["size"]
    response.set_etag(sha256)
    response.headers["Content-Disposition"] = content_disposition("attachment" if attach else "inline", name)
    return response.make_conditional(request)


def sign_delivery(doc: dict) -> dict:
    """The delivery manifest with signed, expiring links to its media and bundle (saved as `<title>-v<version>.zip`)."""
    expires = link_expiry()
    for block in doc["blocks"]:
        for label in ("image", "audio"):
            if block[label].get("sha256"):
                block[label]["url"] = signed_url(block[label]["sha256"], expires)
    if doc["bundle"].get("sha256"):
        doc["bundle"]["file_name"] = content_download_name(doc["title"], doc["version"])
        doc["bundle"]["url"] = signed_url(doc["bundle"]["sha256"], expires) + "&" + urlencode(
            {"name": doc["bundle"]["file_name"]})
    doc["urls_expire_at"] = datetime.fromtimestamp(expires, timezone.utc)
    return doc
