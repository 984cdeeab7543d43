"""The content-addressed media store: objects named by their sha256 under `assets/`.

The bytes live in an `Objects` store (a local directory or an S3 bucket); a digest
names the same bytes forever, so an asset is written once and never changes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterator

from receipts.objects import LocalObjects, Objects, objects_of

_SHA = re.compile(r"^[0-9a-f]{64}$")


class MediaStore:
    def __init__(self, where: Objects | Path | str) -> None:
        self.objects = objects_of(where)

    @staticmethod
    def key(sha256: str) -> str:
        """The object key of an asset; refuses anything that is not a sha256 (no key comes from input)."""
        if not _SHA.match(sha256 or ""):
            raise ValueError(f"not a sha256 digest: {sha256!r}")
        return f"assets/{sha256[:2]}/{sha256}"

    def path(self, sha256: str) -> Path:
        """The file of an asset in a local store (ValueError on object storage, which has no files)."""
        if not isinstance(self.objects, LocalObjects):
            raise ValueError("assets in object storage have no local path; read them with read() or chunks()")
        return self.objects.path(self.key(sha256))

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        key = self.key(sha)
        if self.objects.size(key) != len(data):   # written once: the same digest is the same bytes
            self.objects.put(key, data)
        return sha

    def put_file(self, path: Path) -> tuple[str, int]:
        """Store a file's bytes without holding them whole (a bundle); its digest and size."""
        digest, size = hashlib.sha256(), 0
        with open(path, "rb") as source:
            while piece := source.read(1024 * 1024):
                digest.update(piece)
                size += len(piece)
        sha, key = digest.hexdigest(), self.key(digest.hexdigest())
        if self.objects.size(key) != size:
            self.objects.put_file(key, path)
        return sha, size

    def has(self, sha256: str, *, verify: bool = False) -> bool:
        key = self.key(sha256)
        if not verify:
            return self.objects.size(key) is not None
        data = self.objects.get(key)
        return data is not None and hashlib.sha256(data).hexdigest() == sha256

    def read(self, sha256: str) -> bytes:
        data = self.objects.get(self.key(sha256))
        if data is None:
            raise FileNotFoundError(f"asset {sha256} is not in the media store")
        return data

    def chunks(self, sha256: str) -> Iterator[bytes] | None:
        """The asset's bytes in pieces, without holding it whole; None when it is missing."""
        return self.objects.chunks(self.key(sha256))

    def delete(self, sha256: str) -> bool:
        return self.objects.delete(self.key(sha256))
