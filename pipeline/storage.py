"""The store of media and receipts chosen by the settings: MEDIA_DIR, or an S3 bucket.

Every process builds its stores here, so a worker, the reconciler, the bundle and the
web app on any machine read and write the same objects. One S3 client is kept per
process (and remade after a fork: a forked work horse must not share its parent's
connections). The web app reaches the store through this module, never receipts/.
"""

from __future__ import annotations

import os
from typing import Iterator

from pipeline.core.records import content_disposition
from pipeline.settings import Settings, StorageSettings
from receipts.calls import ReceiptBook
from receipts.media import MediaStore
from receipts.objects import LocalObjects, Objects, S3Objects, s3_client

_clients: dict[tuple, object] = {}


def _client(s: StorageSettings) -> object:
    key = (os.getpid(), s.endpoint_url, s.region, s.access_key_id, s.path_style)
    if key not in _clients:
        _clients[key] = s3_client(endpoint_url=s.endpoint_url, region=s.region, access_key_id=s.access_key_id,
                                  secret_access_key=s.secret_access_key, path_style=s.path_style)
    return _clients[key]


def objects(cfg: Settings) -> Objects:
    s = cfg.storage
    if s.backend == "s3":
        return S3Objects(_client(s), s.bucket, s.prefix)
    return LocalObjects(cfg.media_dir)


def media_store(cfg: Settings) -> MediaStore:
    return MediaStore(objects(cfg))


def receipt_book(cfg: Settings) -> ReceiptBook:
    return ReceiptBook(objects(cfg))


def has_asset(cfg: Settings, sha256: str) -> bool:
    return media_store(cfg).has(sha256)


def asset_file(cfg: Settings, sha256: str):
    """The local file of an asset, or None when the store has no files (object storage)."""
    store = media_store(cfg)
    return store.path(sha256) if isinstance(store.objects, LocalObjects) else None


def asset_chunks(cfg: Settings, sha256: str) -> Iterator[bytes] | None:
    return media_store(cfg).chunks(sha256)


def presigned_asset_url(cfg: Settings, sha256: str, *, media_type: str, cache_control: str,
                        download_name: str | None = None) -> str | None:
    """A short-lived URL that reads the asset straight from the bucket, when delivery is by redirect.

    Only for a caller the app has already let in: the URL itself carries the permission.
    """
    s = cfg.storage
    if s.delivery != "redirect" or s.backend != "s3":
        return None
    store = objects(cfg)
    assert isinstance(store, S3Objects)
    disposition = content_disposition("attachment", download_name) if download_name else None
    return store.presigned_get(MediaStore.key(sha256), s.redirect_seconds, media_type=media_type,
                               cache_control=cache_control, disposition=disposition)
