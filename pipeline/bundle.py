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
from pipeline.core.errors import PipelineError
from pipeline.core.records import extension
from pipeline.core.states import MEDIUM
from receipts.media import MediaStore


def manifest(conn: psycopg.Connection, content_id: int, version: int) -> dict:
    """The manifest of a version whose media tasks all succeeded."""
    row = db.one(conn, "versions_get", {"content_id": content_id, "version": version})
    media = {(t["kind"], t["block_key"]): t for t in db.all(conn, "tasks_media_of_version",
                                                              {"content_id": content_id, "version": version})}
    blocks = []
    for block in row["blocks"]:
        entry = {"key": block["key"], "text": block["text"]}
        for kind, label in MEDIUM.items():
            asset = media.get((kind, block["key"]))
            if asset is None or asset["status"] != "succeeded" or asset["sha256"] is None:
                raise PipelineError(f"block {block['key']}: its {label} is not ready")
            entry[label] = {"file": f"{label}/{block['key']}.{extension(asset['media_type'])}", "sha256": asset["sha256"],
                            "media_type": asset["media_type"], "size": asset["size"]}
        blocks.append(entry)
    return {"content_id": content_id, "version": version, "title": row["title"], "locale": row["locale"],
            "blocks": blocks}


def build(conn: psycopg.Connection, store: MediaStore, content_id: int, version: int, out: Path) -> None:
    """Write the version's bundle to the file `out`, one medium at a time: each is copied into the archive in
    pieces as the store hands them out, so no more than a piece of one medium is in memory."""
    doc = manifest(conn, content_id, version)
    files = {"manifest.json": None}
    for block in doc["blocks"]:
        for label in MEDIUM.values():
            files[block[label]["file"]] = block[label]["sha256"]
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(files):
            info = zipfile.ZipInfo(name, date_time=(2000, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if name.endswith((".webp", ".png", ".jpg", ".mp3")) \
                else zipfile.ZIP_DEFLATED
            if files[name] is None:
                archive.writestr(info, json.dumps(doc, ensure_ascii=False, indent=2, sort_keys=True).encode())
                continue
            pieces = store.chunks(files[name])
            if pieces is None:
                raise FileNotFoundError(f"asset {files[name]} of {name} is not in the media store")
            with archive.open(info, "w") as entry:
                for piece in pieces:
                    entry.write(piece)
