import pytest
import redis

from pipeline import dispatch, versions
from pipeline.reconcile import Reconciler
from receipts.media import MediaStore
from testkit.helpers import EDITOR, draft, work_burst

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def run_version(conn, cfg, rt, saved):
    dispatch.send_due(conn, redis.Redis.from_url(cfg.redis_url))
    work_burst(rt)
    return {r["asset_sha256"] for r in conn.execute("SELECT asset_sha256 FROM tasks WHERE content_id = %s AND "
                                                    "version = %s", (saved.content_id, saved.version))}


def test_retention_deletes_only_old_assets_no_current_or_approved_version_uses(conn, cfg, rt):
    store = MediaStore(cfg.media_dir)
    first = versions.save(conn, draft(1), cfg, by=EDITOR)
    old = run_version(conn, cfg, rt, first)
    other = versions.save(conn, draft(1, title="other", prefix="other"), cfg, by=EDITOR)
    approved = run_version(conn, cfg, rt, other)
    conn.execute("UPDATE contents SET approved_version = 1 WHERE id = %s", (other.content_id,))
    second = versions.save(conn, draft(1, prefix="new"), cfg, by=EDITOR, content_id=first.content_id,
                           base_version=1)
    current = run_version(conn, cfg, rt, second)
    # given every asset is past the retention period
    conn.execute("UPDATE assets SET created_at = now() - interval '400 days'")
    report = Reconciler(cfg, conn, {}).run()
    gone = old - current
    assert gone and report.counts["assets_deleted"] == len(gone)
    assert not any(store.has(sha) for sha in gone)
    assert all(store.has(sha) for sha in current | approved)
    left = {r["sha256"] for r in conn.execute("SELECT sha256 FROM assets")}
    assert left == current | approved


def test_retention_keeps_an_asset_a_regeneration_replaced(conn, cfg, rt):
    # given: a made version whose image an editor regenerated, and then every asset past retention
    from pipeline import regenerate
    store = MediaStore(cfg.media_dir)
    first = versions.save(conn, draft(1), cfg, by=EDITOR)
    run_version(conn, cfg, rt, first)
    image = conn.execute("SELECT id, asset_sha256 FROM tasks WHERE kind = 'image'").fetchone()
    made = regenerate.regenerate(conn, image["id"], cfg, by=EDITOR, reason="too dark", accept_new_charge=True)
    run_version(conn, cfg, rt, made.saved)
    conn.execute("UPDATE assets SET created_at = now() - interval '400 days'")
    # when
    Reconciler(cfg, conn, {}).run()
    # then: the replaced picture is still there; the version's own older bundle is not
    assert store.has(image["asset_sha256"])
    assert conn.execute("SELECT count(*) AS n FROM assets WHERE sha256 = %s", (image["asset_sha256"],)).fetchone()["n"]
