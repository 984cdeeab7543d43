"""Provider calls through real workers: reuse, the ledger, limits, timeouts, the bundle, lookups."""

import hashlib
import io
import json
import zipfile

from pipeline import versions
from pipeline.core.content import parse_draft
from testkit.crashes import key_of
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, lesson, wait_until
from testkit.system import drain


def start_all(system, image_workers=1):
    for _ in range(image_workers):
        system.start_worker("image")
    system.start_worker("tts"), system.start_worker("bundle")


def ledger(system, content_id, version):
    with system.db() as conn:
        rows = conn.execute("SELECT c.outcome, count(*) AS n FROM provider_calls c JOIN tasks t ON t.id = c.task_id "
                            "WHERE t.content_id = %s AND t.version = %s AND t.kind <> 'bundle' GROUP BY 1",
                            (content_id, version)).fetchall()
    return {r["outcome"]: r["n"] for r in rows}


def test_editing_one_block_of_five_makes_two_calls_and_reuses_the_other_eight(system, fake):
    start_all(system)
    body = lesson(5)
    with system.db() as conn:
        first = versions.save(conn, parse_draft(body), system.cfg, by=EDITOR)
    drain(system, first.content_id)
    before = len(fake.recorded)
    body["blocks"][2]["text"] = "第3段：我们改了这一段。"
    with system.db() as conn:
        second = versions.save(conn, parse_draft(body), system.cfg, by=EDITOR, content_id=first.content_id,
                               base_version=1)
    rows = drain(system, second.content_id)
    assert {r["status"] for r in rows if r["version"] == 2} == {"succeeded"}
    assert len(fake.recorded) - before == 2
    assert ledger(system, first.content_id, 2) == {"succeeded": 2, "reused": 8}
    with system.db() as conn:
        reused = conn.execute("SELECT count(*) AS n FROM events WHERE action = 'reused' AND version = 2").fetchone()
    assert reused["n"] == 8


def test_a_read_timeout_after_send_is_unknown_with_one_call_and_no_repeat(system, fake):
    start_all(system)
    fake.script(Behaviour("hang", seconds=5, endpoint="image"))
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), system.cfg, by=EDITOR)
        image = conn.execute("SELECT * FROM tasks WHERE content_id = %s AND kind = 'image'",
                             (saved.content_id,)).fetchone()
    system.dispatch()
    row = system.wait_status(image["id"], "unknown")
    for _ in range(2):
        system.reconcile(), system.dispatch()
    assert system.task(image["id"])["status"] == "unknown"
    assert fake.calls_for(key_of(image)).requests == 1
    assert ledger(system, saved.content_id, 1).get("ambiguous") == 1
    assert row["attempts"] == 1


def test_at_most_max_concurrency_image_calls_are_in_flight_across_four_workers(database_url, redis_url, tmp_path,
                                                                                fake, system):
    limited = system.with_env(IMAGE_MAX_CONCURRENCY="2")
    fake.set_default(Behaviour("delay", seconds=0.3))
    start_all(limited, image_workers=4)
    with limited.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(8)), limited.cfg, by=EDITOR)
    rows = drain(limited, saved.content_id, timeout=90)
    assert {r["status"] for r in rows} == {"succeeded"}
    assert fake.max_in_flight("image") == 2


def test_the_bundle_manifest_matches_the_version_and_every_file(system, fake):
    start_all(system)
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(2)), system.cfg, by=EDITOR)
    rows = drain(system, saved.content_id)
    bundle = rows[-1]
    path = system.cfg.media_dir / "assets" / bundle["asset_sha256"][:2] / bundle["asset_sha256"]
    archive = zipfile.ZipFile(io.BytesIO(path.read_bytes()))
    manifest = json.loads(archive.read("manifest.json"))
    by_key = {(r["kind"], r["block_key"]): r for r in rows}
    assert [b["key"] for b in manifest["blocks"]] == ["b1", "b2"]
    for block in manifest["blocks"]:
        for label, kind in (("image", "image"), ("audio", "tts")):
            entry = block[label]
            assert entry["sha256"] == by_key[(kind, block["key"])]["asset_sha256"]
            assert hashlib.sha256(archive.read(entry["file"])).hexdigest() == entry["sha256"]


def test_a_worker_dying_mid_call_at_a_lookup_capable_provider_succeeds_by_lookup(system, fake):
    local = system.with_env(IMAGE_PROVIDER="local")
    from pipeline.executor import build_providers
    build_providers(local.cfg)["image"].arm("crash_mid_call")
    start_all(local)
    with local.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), local.cfg, by=EDITOR)
    rows = drain(local, saved.content_id, timeout=60)
    image = rows[0]
    assert (image["status"], image["attempts"]) == ("succeeded", 1)
    with local.db() as conn:
        actions = [e["action"] for e in conn.execute("SELECT action FROM events WHERE task_id = %s ORDER BY id",
                                                     (image["id"],))]
    assert actions[-1] == "recovered_by_lookup"


def test_an_unknown_outcome_is_resolved_by_the_next_reconcile_when_the_provider_can_look_it_up(system, fake):
    local = system.with_env(IMAGE_PROVIDER="local")
    from pipeline.executor import build_providers
    build_providers(local.cfg)["image"].arm("accept_then_lose")   # the call is done, the answer is lost
    start_all(local)
    with local.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), local.cfg, by=EDITOR)
        image = conn.execute("SELECT * FROM tasks WHERE content_id = %s AND kind = 'image'",
                             (saved.content_id,)).fetchone()
    local.dispatch()
    local.wait_status(image["id"], "unknown")
    rows = drain(local, saved.content_id)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    with local.db() as conn:
        last = conn.execute("SELECT action, from_status FROM events WHERE task_id = %s ORDER BY id DESC LIMIT 1",
                            (image["id"],)).fetchone()
        calls = conn.execute("SELECT outcome FROM provider_calls WHERE task_id = %s", (image["id"],)).fetchall()
    assert (last["action"], last["from_status"]) == ("recovered_by_lookup", "unknown")
    assert [c["outcome"] for c in calls] == ["ambiguous"]


def test_the_rate_limit_reschedules_without_spending_attempts(system, fake):
    limited = system.with_env(IMAGE_RATE_PER_MINUTE="2")
    limited.start_worker("image")
    with limited.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(3)), limited.cfg, by=EDITOR)
    limited.dispatch()
    with limited.db() as conn:
        def settled():
            rows = conn.execute("SELECT status, attempts FROM tasks WHERE content_id = %s AND kind = 'image' "
                                "ORDER BY id", (saved.content_id,)).fetchall()
            return [(r["status"], r["attempts"]) for r in rows]
        result = wait_until(lambda: (s := settled()) and all(st in ("succeeded", "retry") for st, _ in s) and s,
                            message="image tasks settled")
    # two calls fit in this minute's window; the third waits for the next one with its attempt refunded
    assert sorted(result) == [("retry", 0), ("succeeded", 1), ("succeeded", 1)]
    assert len([r for r in fake.recorded if r.endpoint == "image"]) == 2


def test_secrets_never_reach_logs_or_receipts(system, fake):
    fake.script(Behaviour.fail(401, message="bad key", endpoint="image"))
    start_all(system)
    with system.db() as conn:
        versions.save(conn, parse_draft(lesson(1)), system.cfg, by=EDITOR)
    system.dispatch()
    image = system.wait_status(1, "failed")
    assert "bad key" in image["last_error"] and "sk-test" not in image["last_error"]
    written = [p.read_text(errors="replace") for p in system.cfg.media_dir.rglob("*.json")]
    written += [p.read_text(errors="replace") for p in system.logs.glob("*.log")]
    assert written and not any("sk-test-image" in text or "sk-test-tts" in text for text in written)
