"""The records the decisions and their callers pass around: a claimed task and a stored asset. Pure."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any
from datetime import datetime
from urllib.parse import quote

from providers.base import Result

# The longest note, reason or error text an event, a dead letter or a task keeps; longer text is cut.
MAX_NOTE = 2000


def clip(text: str) -> str:
    """`text` cut to MAX_NOTE characters, as the records keep it."""
    return text[:MAX_NOTE]


# File extensions of the media types we store, for names in bundles and downloads.
EXTENSIONS = {"image/webp": "webp", "image/png": "png", "image/jpeg": "jpg", "audio/wav": "wav",
              "audio/x-wav": "wav", "audio/mpeg": "mp3", "application/zip": "zip", "video/mp4": "mp4"}


def content_disposition(kind: str, name: str) -> str:
    """A Content-Disposition header for a file name of letters, digits, '.', '-' and '_' in any script:
    an ASCII `filename` for old clients and, when the name is not ASCII, the RFC 6266 `filename*`."""
    fallback = "".join(ch if ch.isascii() else "_" for ch in name)
    if fallback == name:
        return f'{kind}; filename="{name}"'
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"


def extension(media_type: str) -> str:
    """The file extension of a media type we store ("bin" for any other)."""
    return EXTENSIONS.get(media_type, "bin")


def idempotency_key(fingerprint: str, task_id: int) -> str:
    """The key a task's provider calls carry: stable across attempts of one task; distinct between tasks that
    share an input (`Task.idempotency_key`; this for a task's row)."""
    return hashlib.sha256(f"{fingerprint}:{task_id}".encode()).hexdigest()[:48]


@dataclass(frozen=True)
class Task:
    """A claimed task: what a worker needs to do one attempt, and to prove it holds the lease."""

    id: int
    content_id: int
    version: int
    kind: str
    block_key: str | None
    input: dict
    fingerprint: str
    attempts: int
    max_attempts: int
    deadline_at: datetime
    lease_token: uuid.UUID
    lease_until: datetime
    attempt_ends_at: datetime | None = None   # the heartbeat stops and the call ends by then
    lane: str = "interactive"                 # its version's lane (pipeline/core/lanes.py)

    @classmethod
    def from_row(cls, row: dict) -> "Task":
        return cls(**{name: row[name] for name in cls.__dataclass_fields__ if name in row})

    @property
    def idempotency_key(self) -> str:
        return idempotency_key(self.fingerprint, self.id)


@dataclass(frozen=True)
class Asset:
    """A media file in the store, as the assets index records it."""

    sha256: str
    media_type: str
    size: int
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None

    @classmethod
    def from_result(cls, sha256: str, result: Result) -> "Asset":
        """The asset a provider's result became once its bytes were stored under `sha256`."""
        meta = result.metadata or {}
        return cls(sha256, result.media_type, len(result.data), meta.get("width"), meta.get("height"),
                   meta.get("duration_ms"))

    @classmethod
    def from_row(cls, row: dict) -> "Asset":
        return cls(row["sha256"], row["media_type"], row["size"], row["width"], row["height"], row["duration_ms"])


@dataclass(frozen=True)
class Work:
    """What a kind's local work (pipeline/core/kinds/, `work`) is given: the worker's connection, the media store,
    the settings and its claimed task."""

    conn: Any
    store: Any
    cfg: Any
    task: Task


@dataclass(frozen=True)
class Made:
    """What local work made, besides the file it wrote: its media type and, where it has them, its size in pixels
    and its length."""

    media_type: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
