"""Where receipts and media bytes live: a local directory or an S3-compatible bucket.

Both kinds keep the same keys (`assets/ab/<sha256>`, `receipts/<task>/<attempt>-intent.json`)
and give the same promise: when `put` returns, the object is whole and durable (locally:
temp file, fsync, rename, fsync of the directory; on S3: the PUT has been acknowledged,
which S3 gives only once the object is stored durably). A reader never sees a partial
object on either.

Imports nothing of ours. botocore's errors are translated here, once, into
`StorageError`, an `OSError`, so callers handle a failing bucket like a failing disk.
Keys are built by our own code from ids and digests, never taken from input.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Iterator, Protocol


CHUNK = 256 * 1024


# Durable local writes: temp file, fsync, os.replace, fsync of the directory.


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


class StorageError(OSError):
    """The object store failed or refused; the message names the bucket, the key and the cause."""


class Objects(Protocol):
    """Bytes by key. `put` is durable on return; a missing key reads as None."""

    def put(self, key: str, data: bytes) -> None: ...

    def put_file(self, key: str, path: Path) -> None:
        """The object becomes the file's bytes, read in pieces (a bundle need not fit in memory)."""

    def get(self, key: str) -> bytes | None: ...

    def size(self, key: str) -> int | None: ...

    def delete(self, key: str) -> bool: ...

    def keys(self, prefix: str) -> list[str]: ...

    def chunks(self, key: str) -> Iterator[bytes] | None: ...


def _pieces(handle) -> Iterator[bytes]:
    with handle:
        while piece := handle.read(CHUNK):
            yield piece


@dataclass(frozen=True)
class LocalObjects:
    """Objects as files under `root` (one machine, or a shared POSIX file system)."""

    root: Path

    def path(self, key: str) -> Path:
        return Path(self.root) / key

    def put(self, key: str, data: bytes) -> None:
        write_atomic(self.path(key), data)

    def put_file(self, key: str, path: Path) -> None:
        with open(path, "rb") as source:
            write_atomic(self.path(key), source)

    def get(self, key: str) -> bytes | None:
        try:
            return self.path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            return None

    def size(self, key: str) -> int | None:
        path = self.path(key)
        return path.stat().st_size if path.is_file() else None

    def delete(self, key: str) -> bool:
        try:
            self.path(key).unlink()
            return True
        except FileNotFoundError:
            return False

    def keys(self, prefix: str) -> list[str]:
        folder = self.path(prefix)
        if not folder.is_dir():
            return []
        return sorted(f"{prefix}{p.name}" for p in folder.iterdir() if p.is_file() and not p.name.startswith("."))

    def chunks(self, key: str) -> Iterator[bytes] | None:
        try:
            handle = open(self.path(key), "rb")
        except (FileNotFoundError, IsADirectoryError):
            return None
        return _pieces(handle)


def objects_of(where: Objects | Path | str) -> Objects:
    """A store given as a path is a local directory (the default kind of store)."""
    return LocalObjects(Path(where)) if isinstance(where, (str, Path)) else where


@dataclass(frozen=True)
class S3Objects:
    """Objects in an S3-compatible bucket, every key under `prefix`.

    `client` is a boto3 S3 client (see `s3_client`); it is injected so one client serves
    a process and tests can point it at any S3-protocol server.
    """

    client: object = field(repr=False)
    bucket: str
    prefix: str = ""

    def _key(self, key: str) -> str:
        return f"{self.prefix}{key}"

    def _fail(self, what: str, key: str, exc: Exception) -> StorageError:
        return StorageError(f"S3 {what} of s3://{self.bucket}/{self._key(key)} failed: "
                            f"{exc.__class__.__name__}: {exc}"[:500])

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=data)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("PUT", key, exc) from exc

    def put_file(self, key: str, path: Path) -> None:
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            with open(path, "rb") as body:   # one PUT, the body streamed from the file with its length
                self.client.put_object(Bucket=self.bucket, Key=self._key(key), Body=body,
                                       ContentLength=os.fstat(body.fileno()).st_size)
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("PUT", key, exc) from exc

    def _object(self, key: str):
        return self._unless_missing("GET", key, self.client.get_object)

    def _unless_missing(self, verb: str, key: str, request):
        """`request` for the key's object, or None when the bucket has no such key; any other failure a
        StorageError naming the verb, the bucket and the key."""
        from botocore.exceptions import BotoCoreError, ClientError
        try:
            return request(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise self._fail(verb, key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail(verb, key, exc) from exc

    def get(self, key: str) -> bytes | None:
        found = self._object(key)
        if found is None:
            return None
        try:
            return found["Body"].read()
        except Exception as exc:   # a connection cut mid-body: botocore raises several kinds
            raise self._fail("GET", key, exc) from exc

    def chunks(self, key: str) -> Iterator[bytes] | None:
        found = self._object(key)
        return None if found is None else found["Body"].iter_chunks(CHUNK)

    def size(self, key: str) -> int | None:
        found = self._unless_missing("HEAD", key, self.client.head_object)
        return None if found is None else int(found["ContentLength"])

    def delete(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError
        if self.size(key) is None:
            return False
        try:
            self.client.delete_object(Bucket=self.bucket, Key=self._key(key))
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("DELETE", key, exc) from exc
        return True

    def keys(self, prefix: str) -> list[str]:
        from botocore.exceptions import BotoCoreError, ClientError
        found: list[str] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket,
                                                                               Prefix=self._key(prefix)):
                found += [item["Key"][len(self.prefix):] for item in page.get("Contents", [])]
        except (BotoCoreError, ClientError) as exc:
            raise self._fail("LIST", prefix, exc) from exc
        return sorted(found)

    def presigned_get(self, key: str, seconds: int, *, media_type: str, cache_control: str,
                      disposition: str | None = None) -> str:
        """A URL that reads the object without credentials until `seconds` from now."""
        params = {"Bucket": self.bucket, "Key": self._key(key), "ResponseContentType": media_type,
                  "ResponseCacheControl": cache_control}
        if disposition:
            params["ResponseContentDisposition"] = disposition
        return self.client.generate_presigned_url("get_object", Params=params, ExpiresIn=seconds)


def s3_client(*, endpoint_url: str | None, region: str, access_key_id: str | None, secret_access_key: str | None,
              connect_timeout: float = 5.0, read_timeout: float = 60.0, path_style: bool = False):
    """A boto3 S3 client with timeouts and retries; without keys, boto3's own chain (an instance role)."""
    import boto3
    from botocore.config import Config

    config = Config(connect_timeout=connect_timeout, read_timeout=read_timeout, signature_version="s3v4",
                    retries={"max_attempts": 4, "mode": "standard"},
                    s3={"addressing_style": "path" if path_style else "auto"})
    return boto3.session.Session().client("s3", endpoint_url=endpoint_url or None, region_name=region,
                                          aws_access_key_id=access_key_id or None,
                                          aws_secret_access_key=secret_access_key or None, config=config)
