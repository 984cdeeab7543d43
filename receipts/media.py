"""The content-addressed media store: files named by their sha256 under MEDIA_DIR/assets."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from receipts.durable import write_atomic

_SHA = re.compile(r"^[0-9a-f]{64}$")


class MediaStore:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def path(self, sha256: str) -> Path:
        """Where an asset lives; refuses anything that is not a sha256 (no path comes from input)."""
        if not _SHA.match(sha256 or ""):
            raise ValueError(f"not a sha256 digest: {sha256!r}")
        return self.root / "assets" / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        sha = hashlib.sha256(data).hexdigest()
        target = self.path(sha)
        if not (target.exists() and target.stat().st_size == len(data)):
            write_atomic(target, data)
        return sha

    def has(self, sha256: str, *, verify: bool = False) -> bool:
        target = self.path(sha256)
        if not target.is_file():
            return False
        return not verify or hashlib.sha256(target.read_bytes()).hexdigest() == sha256

    def read(self, sha256: str) -> bytes:
        return self.path(sha256).read_bytes()

    def delete(self, sha256: str) -> bool:
        try:
            self.path(sha256).unlink()
            return True
        except FileNotFoundError:
            return False
