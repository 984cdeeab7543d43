"""Receipts, recovery, retention and the bundle on both kinds of store (a directory and a bucket).

Real `rq worker` processes call the fake provider; `storage_env` runs each test on MEDIA_DIR
and on a bucket of the S3 test server. Reads that prove durability come from a store built
for another machine (another MEDIA_DIR), so only what reached the shared store counts.
"""

from __future__ import annotations

import io
import json
import zipfile

import pytest
import redis

from pipeline import dispatch, runtime, settings, storage, versions
from pipeline.core.records import idempotency_key
from pipeline.reconcile import Reconciler
from testkit.crashes import (killed_after_the_result_receipt_is_recovered_from_it,
                             one_block_through_real_workers, save_one_block,
                             worker_in_the_middle_of_an_image_call)
from testkit.helpers import EDITOR, ControlledExecutor, draft, make_settings, work_burst


def elsewhere(system, tmp_path) -> settings.Settings:
    """The same settings on another machine: its own MEDIA_DIR."""
    return settings.load({**system.env, "MEDIA_DIR": str(tmp_path / "other-machine")})


def test_a_lesson_runs_through_real_workers_and_its_bundle_holds_the_stored_media(system, fake):
    (image, tts, bundle), rows = one_block_through_real_workers(system)
    store = storage.media_store(system.cfg)
    archive = zipfile.ZipFile(io.BytesIO(store.read(rows[2]["asset_sha256"])))
    manifest = json.loads(archive.read("manifest.json"))
    block = manifest["blocks"][0]
    assert archive.read(block["image"]["file"]) == store.read(rows[0]["asset_sha256"])
    assert archive.read(block["audio"]["file"]) == store.read(rows[1]["asset_sha256"])


def test_the_intent_receipt_is_in_the_store_before_the_provider_is_called(system, fake, tmp_path):
    saved, (image, tts, bundle) = save_one_block(system)
    worker_in_the_middle_of_an_image_call(system, fake)
    # while the provider holds the call, the intent is already readable from the store
    found = storage.receipt_book(system.cfg).intent(image["id"], 1)
    assert found is not None and found.idempotency_key == idempotency_key(image["fingerprint"], image["id"])
    assert storage.receipt_book(system.cfg).result(image["id"], 1) is None
    fake.release()


def test_a_worker_killed_after_its_result_receipt_is_recovered_from_the_receipt(system, fake):
    killed_after_the_result_receipt_is_recovered_from_it(system, fake, storage.receipt_book(system.cfg))


def run_version(conn, cfg, rt, saved) -> set[str]:
    dispatch.send_due(conn, redis.Redis.from_url(cfg.redis_url))
    work_burst(rt)
    return {r["asset_sha256"] for r in conn.execute("SELECT asset_sha256 FROM tasks WHERE content_id = %s AND "
                                                    "version = %s", (saved.content_id, saved.version))}


@pytest.mark.server_major
def test_retention_deletes_old_unused_assets_and_old_receipts_from_the_store(database_url, redis_url, tmp_path,
                                                                              storage_env):
    from pipeline.db import connect
    cfg = make_settings(database_url, redis_url, tmp_path / "media", **storage_env)
    store, book = storage.media_store(cfg), storage.receipt_book(cfg)
    rt = runtime.Runtime(cfg, ControlledExecutor(store), worker_id="test-worker")
    try:
        with connect(database_url, autocommit=True) as conn:
            first = versions.save(conn, draft(1), cfg, by=EDITOR)
            old = run_version(conn, cfg, rt, first)
            second = versions.save(conn, draft(1, prefix="new"), cfg, by=EDITOR, content_id=first.content_id,
                                   base_version=1)
            current = run_version(conn, cfg, rt, second)
            old_task = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND version = 1 ORDER BY id",
                                    (first.content_id,)).fetchone()["id"]
            from receipts.calls import Intent
            book.write_intent(Intent(old_task, 1, "lease", "fake", "m", "f" * 64, "k", 1.0))
            # given everything is past the retention period
            conn.execute("UPDATE assets SET created_at = now() - interval '400 days'")
            conn.execute("UPDATE tasks SET updated_at = now() - interval '400 days' WHERE version = 1")
            report = Reconciler(cfg, conn, {}).run()
    finally:
        runtime.install(None)
    gone = old - current
    assert gone and report.counts["assets_deleted"] == len(gone)
    assert not any(store.has(sha) for sha in gone)
    assert all(store.has(sha) for sha in current)
    assert book.of_task(old_task) == [] and report.counts["receipts_compacted"] >= 1


def test_when_the_intent_receipt_cannot_be_stored_the_provider_is_not_called_and_the_task_retries(system, fake):
    # given a store that refuses every write (a bucket that does not exist; a file where MEDIA_DIR should be)
    if system.env.get("STORAGE") == "s3":
        broken = system.with_env(S3_BUCKET="no-such-bucket-anywhere")
    else:
        blocker = system.cfg.media_dir
        blocker.parent.mkdir(parents=True, exist_ok=True)
        blocker.write_text("not a directory")
        broken = system
    saved, (image, tts, bundle) = save_one_block(broken)
    broken.start_worker("image")
    broken.dispatch()
    row = broken.wait_status(image["id"], "retry", "failed", "unknown")
    assert row["status"] == "retry" and "intent receipt" in row["last_error"]
    assert fake.calls_for(idempotency_key(image["fingerprint"], image["id"])).requests == 0
