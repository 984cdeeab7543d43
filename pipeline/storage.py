"""The store of media and receipts chosen by the settings: MEDIA_DIR, or an S3 bucket.

Every process builds its stores here, so a worker, the reconciler, the bundle and the
web app on any machine read and write the same objects. One S3 client is kept per
process (and remade after a fork: a forked work horse must not share its parent's
connections). The web app reaches the store through this module, never receipts/.
It also counts the writes the store refused in a row, per process (`REFUSALS`): how long a
task waits for a failing store to come back grows with that count.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from typing import Iterator

from pipeline.core.policy import backoff_seconds
from pipeline.core.records import content_disposition
from pipeline.log import log
from pipeline.settings import Settings, StorageSettings
from receipts.calls import ReceiptBook
from receipts.media import MediaStore
from receipts.objects import LocalObjects, Objects, S3Objects, s3_client

_clients: dict[tuple, object] = {}


@dataclass
class Refusals:
    """The writes the store refused in a row, in this process (a full disk, a read-only directory, a refusing
    bucket); a write it took sets `count` back to 0."""

    count: int = 0
    rng: random.Random = field(default_factory=random.Random)

    def refused(self, cfg: Settings, what: str, exc: OSError) -> float:
        """One more refusal: logged, and the seconds to wait before writing again, a backoff capped and jittered as
        a retry's (BACKOFF_BASE_SECONDS, BACKOFF_CAP_SECONDS) that grows while the store keeps refusing."""
        self.count += 1
        log("store_refused", what=what, refusals=self.count, error=f"{exc.__class__.__name__}: {exc}"[:300])
        return backoff_seconds(self.count, cfg.backoff_base_seconds, cfg.backoff_cap_seconds, self.rng)


REFUSALS = Refusals()   # this process's


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
