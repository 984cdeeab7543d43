"""Atomic, durable file writes: temp file, fsync, os.replace, fsync of the directory."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import BinaryIO


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(folder: Path) -> None:
    """Create `folder` and its missing parents durably: each new entry is fsynced into its parent."""
    if folder.is_dir():   # the usual case: one stat, not one per parent
        return
    missing = [d for d in [folder, *folder.parents] if not d.exists()]
    if not missing:
        return
    folder.mkdir(parents=True, exist_ok=True)
    for created in reversed(missing):
        fsync_dir(created.parent)


def write_atomic(path: Path, data: bytes | BinaryIO) -> None:
    """After this returns, `path` holds `data` (bytes, or everything a readable file holds) whole, even
    across a crash or power loss."""
    make_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            if isinstance(data, (bytes, bytearray, memoryview)):
                handle.write(data)
            else:
                shutil.copyfileobj(data, handle, 1024 * 1024)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)
