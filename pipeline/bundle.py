"""The delivery bundle of a version: a zip with manifest.json and every media file.

Deterministic: the same version content and media give the same bytes (fixed
timestamps, sorted entries), so an unchanged version reuses its bundle.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import psycopg

from pipeline import db
from pipeline import video
from pipeline.core import kinds
from pipeline.core.errors import PipelineError
from pipeline.core.records import Made, Work, extension
from receipts.media import MediaStore


def manifest(conn: psycopg.Connection, content_id: int, version: int) -> dict:
    """The manifest of a version whose delivered tasks all succeeded: per block its media, and the version's own
    (the video, named `lesson`)."""
    row = db.one(conn, "versions_get", {"content_id": content_id, "version": version})
    media = {(t["kind"], t["block_key"]): t for t in db.all(conn, "tasks_media_of_version",
                                                              {"content_id": content_id, "version": version})}

    def entry(kind: kinds.Kind, key: str | None) -> dict:
        asset = media.get((kind.name, key))
        if asset is None or asset["status"] != "succeeded" or asset["sha256"] is None:
            raise PipelineError(f"{f'block {key}: its' if key else 'the version: its'} {kind.medium} is not ready")
        return {"file": f"{kind.medium}/{key or 'lesson'}.{extension(asset['media_type'])}",
                "sha256": asset["sha256"], "media_type": asset["media_type"], "size": asset["size"]}
    delivered = [k for k in kinds.every() if k.delivered and any(name == k.name for name, _ in media)]
    blocks = [{"key": block["key"], "text": block["text"],
               **{k.medium: entry(k, block["key"]) for k in delivered if k.per_block}} for block in row["blocks"]]
    doc = {"content_id": content_id, "version": version, "title": row["title"], "locale": row["locale"],
           "blocks": blocks}
    for kind in delivered:
        if not kind.per_block:
            doc[kind.medium] = entry(kind, None)
    if "video" in doc:   # its captions, read from its own track, as a WebVTT file beside it
        doc["video"]["captions"] = doc["video"]["file"].rsplit(".", 1)[0] + ".vtt"
    return doc


def make(work: Work, out: Path) -> Made:
    """The bundle task's local work (pipeline/core/kinds/bundle.py)."""
    build(work.conn, work.store, work.task.content_id, work.task.version, out)
    return Made("application/zip")


def build(conn: psycopg.Connection, store: MediaStore, content_id: int, version: int, out: Path) -> None:
    """Write the version's bundle to the file `out`, one medium at a time: each is copied into the archive in
    pieces as the store hands them out, so no more than a piece of one medium is in memory."""
    doc = manifest(conn, content_id, version)
    files = {"manifest.json": None}
    for part in [*doc["blocks"], doc]:
        for value in part.values():
            if isinstance(value, dict) and "sha256" in value:
                files[value["file"]] = value["sha256"]
    captions = doc["video"]["captions"] if "video" in doc else None
    if captions:
        files[captions] = None
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if name.endswith((".webp", ".png", ".jpg", ".mp3", ".mp4")) \
                else zipfile.ZIP_DEFLATED
            if name == captions:
                archive.writestr(info, video.webvtt(video.captions(video.read_asset(store, doc["video"]["sha256"]))))
                continue
            if files[name] is None:
                archive.writestr(info, json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode())
                continue
            pieces = store.chunks(files[name])
            if pieces is None:
                raise FileNotFoundError(f"asset {files[name]} of {name} is not in the media store")
            with archive.open(info, "w") as entry:
                for piece in pieces:
                    entry.write(piece)

