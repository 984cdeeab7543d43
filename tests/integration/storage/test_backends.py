"""The store of media and receipts gives the same promises on a local directory and on an S3 bucket.

Every test here runs twice (`storage_env`): on MEDIA_DIR and on a bucket of a real S3-protocol
server process. "Another machine" is a second store built from the same settings with a
different MEDIA_DIR and, on S3, its own client: it sees only what reached the shared store.
"""

from __future__ import annotations

import hashlib

import boto3
import pytest

from pipeline import settings, storage
from receipts.calls import Intent, ResultReceipt, ReceiptBook
from receipts.media import MediaStore
from receipts.objects import S3Objects, StorageError, s3_client


def machine(tmp_path, env: dict, name: str) -> settings.Settings:
    return settings.load({"MEDIA_DIR": str(tmp_path / name), **env})


def peer(tmp_path, env: dict) -> settings.Settings:
    """Another process reading the store: on another machine with S3, on the same disk with a local store."""
    return machine(tmp_path, env, "b" if env else "a")


def intent(task_id: int = 7, attempt: int = 1) -> Intent:
    return Intent(task_id, attempt, "lease-1", "fake", "m1", "f" * 64, "key-1", 1.5)


def outcome(sha: str, task_id: int = 7, attempt: int = 1) -> ResultReceipt:
    return ResultReceipt(task_id, attempt, "lease-1", "req-1", sha, 5, "image/png", 1, 1, None, 12, 2.0)


class Counting:
    """The real store, counting the writes that reach it."""

    def __init__(self, objects):
        self.objects, self.puts = objects, []

    def __getattr__(self, name):
        return getattr(self.objects, name)

    def put(self, key, data):
        self.puts.append(key)
        self.objects.put(key, data)


def test_an_asset_is_kept_under_its_sha256_and_written_only_once(tmp_path, storage_env):
    cfg = machine(tmp_path, storage_env, "a")
    counting = Counting(storage.objects(cfg))
    store = MediaStore(counting)
    sha = store.put(b"picture bytes")
    again = store.put(b"picture bytes")
    assert sha == again == hashlib.sha256(b"picture bytes").hexdigest()
    assert counting.puts == [f"assets/{sha[:2]}/{sha}"]
    other = storage.media_store(peer(tmp_path, storage_env))
    assert other.read(sha) == b"picture bytes" and other.has(sha, verify=True)
    assert b"".join(other.chunks(sha)) == b"picture bytes"


def test_an_asset_whose_bytes_do_not_match_its_digest_fails_verification(tmp_path, storage_env):
    cfg = machine(tmp_path, storage_env, "a")
    sha = hashlib.sha256(b"the real bytes").hexdigest()
    storage.objects(cfg).put(MediaStore.key(sha), b"something else")
    store = storage.media_store(cfg)
    assert store.has(sha) and not store.has(sha, verify=True)


def test_a_receipt_written_on_one_machine_is_read_on_another_as_soon_as_the_write_returns(tmp_path, storage_env):
    here = storage.receipt_book(machine(tmp_path, storage_env, "a"))
    there = storage.receipt_book(machine(tmp_path, storage_env, "b"))
    here.write_intent(intent())
    if storage_env:   # on S3 the other machine sees it; locally MEDIA_DIR is the machine's own
        assert there.intent(7, 1) == intent()
    else:
        assert there.intent(7, 1) is None and here.intent(7, 1) == intent()
    here.write_result(outcome("a" * 64))
    assert here.result(7, 1) == outcome("a" * 64)
    assert here.result(7, 2) is None and here.intent(8, 1) is None


def test_the_receipts_of_a_task_are_listed_oldest_first_and_compacted_away(tmp_path, storage_env):
    book = storage.receipt_book(machine(tmp_path, storage_env, "a"))
    book.write_intent(intent(attempt=2))
    book.write_intent(intent(attempt=1))
    book.write_result(outcome("b" * 64, attempt=1))
    book.write_intent(intent(task_id=70))
    assert [r["file"] for r in book.of_task(7)] == ["0001-intent.json", "0001-result.json", "0002-intent.json"]
    assert book.compact(7) == 3
    assert book.of_task(7) == [] and book.intent(7, 2) is None
    assert book.intent(70, 1) == intent(task_id=70)


def test_a_deleted_asset_is_gone_for_every_machine(tmp_path, storage_env):
    store = storage.media_store(machine(tmp_path, storage_env, "a"))
    sha = store.put(b"old")
    assert store.delete(sha) and not store.delete(sha)
    assert not storage.media_store(peer(tmp_path, storage_env)).has(sha)


def test_object_storage_keeps_every_key_under_its_prefix(tmp_path, s3_env):
    cfg = machine(tmp_path, s3_env, "a")
    sha = storage.media_store(cfg).put(b"x")
    storage.receipt_book(cfg).write_intent(intent())
    client = boto3.client("s3", endpoint_url=s3_env["S3_ENDPOINT_URL"], region_name="us-east-1",
                          aws_access_key_id="k", aws_secret_access_key="s")
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3_env["S3_BUCKET"])["Contents"])
    assert keys == [f"mediapipe/assets/{sha[:2]}/{sha}", "mediapipe/receipts/7/0001-intent.json"]


def test_a_bucket_that_fails_raises_a_storage_error_naming_bucket_and_key(tmp_path, s3_env):
    client = s3_client(endpoint_url=s3_env["S3_ENDPOINT_URL"], region="us-east-1", access_key_id="k",
                       secret_access_key="s", path_style=True)
    missing = S3Objects(client, "no-such-bucket-here", "p/")
    with pytest.raises(StorageError, match="no-such-bucket-here/p/receipts/7/0001-intent.json") as caught:
        ReceiptBook(missing).write_intent(intent())
    assert isinstance(caught.value, OSError)


def test_a_store_nobody_listens_on_fails_as_a_storage_error(s3_env):
    from bin.embedded import free_port
    client = s3_client(endpoint_url=f"http://127.0.0.1:{free_port()}", region="us-east-1", access_key_id="k",
                       secret_access_key="s", connect_timeout=0.5, path_style=True)
    with pytest.raises(StorageError, match="PUT"):
        ReceiptBook(S3Objects(client, "b", "")).write_intent(intent())


def test_a_large_file_goes_in_and_out_of_the_store_in_pieces(tmp_path, storage_env):
    import tracemalloc
    # a bundle-sized file (24 MiB) stored from disk and read back as pieces: never whole in memory
    big = tmp_path / "bundle.zip"
    with open(big, "wb") as out:
        for i in range(24):
            out.write(hashlib.sha256(str(i).encode()).digest() * 32768)   # 1 MiB
    store = storage.media_store(machine(tmp_path, storage_env, "a"))
    tracemalloc.start()
    sha, size = store.put_file(big)
    digest, seen = hashlib.sha256(), 0
    for piece in store.chunks(sha):
        digest.update(piece)
        seen += len(piece)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert (size, seen) == (24 * 1024 * 1024, 24 * 1024 * 1024)
    assert sha == digest.hexdigest() == hashlib.sha256(big.read_bytes()).hexdigest()
    assert peak < 8 * 1024 * 1024, f"peak {peak} bytes"
