"""`GET /media/<sha256>`: stored assets by content address, for callers allowed to see them.

Only a 64-character lowercase hex digest that the assets index knows is served; the
file path is derived from the digest by the media store, never taken from input.

Drafts are private: an asset is served to a signed-in UI session or an `X-API-Key` with
read access, of a team that has a content made with it (pipeline.teams), marked `Cache-Control: private`. The delivery manifest of an approved version
hands out signed links instead (`?c=<content>&v=<version>&expires=<unix time>&signature=<hex>`,
an HMAC-SHA256 of the digest, the content, the version and the expiry under a key derived from
SECRET_KEY, valid MEDIA_URL_TTL_SECONDS), so the app that consumes a delivery needs no key. A link
serves only while its version is the approved one (410 after a withdrawal or a newer approval);
its answers are private and revalidated on every use unless MEDIA_LINK_CACHE=public lets any
cache keep them until the link expires. Content never changes under a digest, so the ETag is
the digest.

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

from pipeline import overview, storage, teams
from pipeline.core.content import download_name as content_download_name
from pipeline.core.records import content_disposition, extension
from pipeline.core import kinds
from web import contract
from web.auth import HEADER, api_principal, session_principal
from web.db import get_conn, settings
from pipeline.core.errors import InvalidInput
from web.errors import Problem
from web.inputs import MAX_ID, MAX_VERSION, whole

bp = Blueprint("media", __name__)
_SHA = re.compile(r"[0-9a-f]{64}")
PRIVATE = "private, max-age=3600"


def _mac(sha256: str, content_id: int, version: int, expires: int) -> str:
    key = hmac.new(settings().secret_key.encode(), b"mediapipe media link v2", hashlib.sha256).digest()
    return hmac.new(key, f"{sha256}:{content_id}:{version}:{expires}".encode(), hashlib.sha256).hexdigest()


def link_expiry(now: float | None = None) -> int:
    """When links made now expire: TTL from now, rounded up to the minute so links stay stable for a minute."""
    now = time.time() if now is None else now
    return math.ceil((now + settings().media_url_ttl_seconds) / 60) * 60


def signed_url(sha256: str, expires: int, content_id: int, version: int) -> str:
    """A link to one medium of the delivery of `version` of `content_id`: it serves while that version is the
    approved one and until `expires`."""
    return url_for("media.get", sha256=sha256, c=content_id, v=version, expires=expires,
                   signature=_mac(sha256, content_id, version, expires))


def media_url(sha256: str | None) -> str | None:
    """A plain link to a medium, for the signed-in readers of drafts (the API's documents); None without one."""
    return url_for("media.get", sha256=sha256) if sha256 else None


def _signed_link_age() -> int | None:
    """Seconds the request's signed link stays valid; None without one; 403 for a bad or expired link, 410 for
    a link whose version is no longer the approved one (withdrawn, or a newer version approved)."""
    args = request.args
    if args.get("expires") is None and args.get("signature") is None:
        return None
    sha256, signature = request.view_args["sha256"], args.get("signature") or ""
    try:
        content_id = whole(args.get("c"), "c", low=1, high=MAX_ID)
        version = whole(args.get("v"), "v", low=1, high=MAX_VERSION)
        expires = whole(args.get("expires"), "expires", low=0, high=10**12)
    except InvalidInput:
        content_id = version = expires = None
    if expires is None or not hmac.compare_digest(signature.encode(),
                                                  _mac(sha256, content_id, version, expires).encode()):
        raise Problem(403, "invalid_link", "this media link is not valid; take the links of a fresh delivery manifest")
    left = expires - int(time.time())
    if left <= 0:
        raise Problem(403, "link_expired", "this media link has expired; fetch the delivery manifest again for "
                                           "fresh links")
    if overview.approved_version(get_conn(), content_id) != version:
        raise Problem(410, "link_withdrawn", f"this link was issued for version {version} of content {content_id}, "
                                             "which is no longer the approved version; fetch the delivery manifest "
                                             "again")
    return left


def _may_read(sha256: str) -> None:
    """A signed-in UI session, or an API key with read access (401 without either, 403 without read), of a team
    that sees a content made with this medium (pipeline.teams; 404 as for an unknown digest otherwise)."""
    principal = api_principal("read") if request.headers.get(HEADER) else session_principal()
    if principal is None:
        raise Problem(401, "unauthorized", f"media of drafts needs a signed-in session or an API key in the "
                                           f"{HEADER} header; delivered media come with signed links")
    if not teams.sees_asset(get_conn(), principal, sha256):
        abort(404, description="no such media")


@bp.get("/media/<string:sha256>")
def get(sha256: str) -> Response:
    if not _SHA.fullmatch(sha256):
        abort(404, description="no such media")
    contract.check_request()   # c, v, expires, signature and name as the document says (a 422 naming the one)
    left = _signed_link_age()
    if left is None:
        _may_read(sha256)
    asset = overview.asset(get_conn(), sha256)
    if asset is None or not storage.has_asset(settings(), sha256):
        abort(404, description="no such media")
    cache = PRIVATE if left is None else delivery_cache(left)
    if request.args.get("captions") is not None:
        return _captions(sha256, asset, cache)
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


_NAME = re.compile(r"[\w.-]{1,120}")


def _captions(sha256: str, asset: dict, cache: str) -> Response:
    """`?captions=vtt`: a lesson video's caption track as a WebVTT file (an HTML5 <track>), read from the video."""
    if asset["media_type"] != "video/mp4":
        abort(404, description="only a lesson video has captions")
    from pipeline import video   # FFmpeg's libraries load only when captions are asked for
    chunks = storage.asset_chunks(settings(), sha256)
    if chunks is None:
        abort(404, description="no such media")
    response = Response(video.webvtt(video.captions(b"".join(chunks))),
                        mimetype="text/vtt")
    response.headers["Cache-Control"] = cache
    response.headers["X-Content-Type-Options"] = "nosniff"
    return response


def download_name(media_type: str) -> str | None:
    """The `name` a link asks the file to be saved as (`<title>-v<version>.zip`, pipeline.core.content.download_name):
    only letters, digits, '.', '-' and '_'; the extension is always the asset's own. None without one, 404 otherwise."""
    name = request.args.get("name")
    if name is None:
        return None
    if not _NAME.fullmatch(name) or name.startswith("."):
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


def delivery_cache(left: int) -> str:
    """Cache-Control of a medium served by a signed link. `private` (the default, MEDIA_LINK_CACHE): no shared
    cache keeps it, and a browser asks again on every use (its ETag makes that a 304), so a withdrawn approval
    takes effect at once. `public`: any cache may keep it until the link expires, withdrawal or not."""
    if settings().media_link_cache == "public":
        return f"public, max-age={left}, immutable"
    return "private, no-cache"


def sign_delivery(doc: dict) -> dict:
    """The delivery manifest with signed, expiring links to its media and bundle (saved as `<title>-v<version>.zip`),
    each bound to the manifest's content and version."""
    expires, content_id, version = link_expiry(), doc["content_id"], doc["version"]
    for block in doc["blocks"]:
        for label in (kind.medium for kind in kinds.media()):
            if label in block and block[label].get("sha256"):
                block[label]["url"] = signed_url(block[label]["sha256"], expires, content_id, version)
    for label in (kind.medium for kind in kinds.every() if kind.delivered and not kind.per_block):
        if doc.get(label, {}).get("sha256"):   # the version's own media (the lesson video)
            doc[label]["url"] = signed_url(doc[label]["sha256"], expires, content_id, version)
    if doc.get("video", {}).get("captions"):   # its captions: the same link, ?captions=vtt
        doc["video"]["captions_url"] = doc["video"]["url"] + "&" + urlencode({"captions": "vtt"})
    if doc["bundle"].get("sha256"):
        doc["bundle"]["file_name"] = content_download_name(doc["title"], doc["version"])
        doc["bundle"]["url"] = signed_url(doc["bundle"]["sha256"], expires, content_id, version) + "&" + urlencode(
            {"name": doc["bundle"]["file_name"]})
    doc["urls_expire_at"] = datetime.fromtimestamp(expires, timezone.utc)
    return doc
