"""The spend guard through real workers: one paid call per distinct input, budgets, honest bundles and ledger."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections import Counter

import pytest

from pipeline import versions
from pipeline.core.content import parse_draft
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, lesson, wait_until
from testkit.system import drain


def paid_inputs(fake) -> Counter:
    """How often the provider executed each distinct input (endpoint and text), whatever the key."""
    executed = Counter()
    for request in fake.recorded:
        text = request.body.get("prompt") or request.body.get("input")
        executed[(request.endpoint, text)] += 1
    return executed


def statuses(system, content_id: int, version: int) -> dict:
    with system.db() as conn:
        rows = conn.execute("SELECT kind::text, block_key, status::text, waiting_for FROM tasks "
                            "WHERE content_id = %s AND version = %s", (content_id, version)).fetchall()
    return {(r["kind"], r["block_key"]): (r["status"], r["waiting_for"]) for r in rows}


@pytest.mark.parametrize("timing", ["held in flight", "1.5 s later"])
def test_a_quick_resave_pays_once_for_every_input_that_was_in_flight(system, fake, timing):
    # given: six workers and six provider slots per kind; a three-block lesson whose six calls are in
    # flight (held until told, or taking 3 s), so three workers per kind are free for the re-save
    guarded = system.with_env(IMAGE_MAX_CONCURRENCY="6", TTS_MAX_CONCURRENCY="6", IMAGE_READ_TIMEOUT="10",
                              TTS_READ_TIMEOUT="10")
    fake.set_default(Behaviour("hold", seconds=60) if timing == "held in flight" else Behaviour("delay", seconds=3))
    for _ in range(6):
        guarded.start_worker("image"), guarded.start_worker("tts")
    guarded.start_worker("bundle")
    body = lesson(3)
    with guarded.db() as conn:
        first = versions.save(conn, parse_draft(body), guarded.cfg, by=EDITOR)
    guarded.dispatch()
    if timing == "held in flight":
        wait_until(lambda: fake.in_flight("image") == 3 and fake.in_flight("audio") == 3, timeout=30,
                   message="three calls of each kind in flight")
    else:
        time.sleep(1.5)
    # when: the editor fixes a typo in block 2
    body["blocks"][1]["text"] = "第2段：我们在学校学习汉语。"
    with guarded.db() as conn:
        versions.save(conn, parse_draft(body), guarded.cfg, by=EDITOR, content_id=first.content_id, base_version=1)
    guarded.dispatch()
    deadline = time.monotonic() + 120
    while any(status != "succeeded" for status, _ in statuses(guarded, first.content_id, 2).values()):
        assert time.monotonic() < deadline, statuses(guarded, first.content_id, 2)
        fake.release()
        guarded.dispatch(), guarded.reconcile()
        time.sleep(0.2)
    # then: no input was paid for twice; version 2 paid only for its changed block and reused the rest
    executed = paid_inputs(fake)
    assert max(executed.values()) == 1, [k for k, n in executed.items() if n > 1]
    assert executed[("image", "第2段：我们在学校学习汉语。")] == executed[("audio", "第2段：我们在学校学习汉语。")] == 1
    unchanged = [(endpoint, text) for endpoint in ("image", "audio")
                 for text in ("第1段：我们在学校学习。", "第3段：我们在学校学习。")]
    assert [executed[key] for key in unchanged] == [1, 1, 1, 1]
    with guarded.db() as conn:
        reused = conn.execute("SELECT count(*) AS n FROM provider_calls c JOIN tasks t ON t.id = c.task_id "
                              "WHERE t.content_id = %s AND t.version = 2 AND c.outcome = 'reused'",
                              (first.content_id,)).fetchone()["n"]
    if timing == "held in flight":
        assert reused == 4   # blocks 1 and 3, image and narration, in flight for version 1 at the re-save
    else:   # on a slow machine a call may not have started by then: version 2 makes it, once
        assert 1 <= reused <= 4


def test_racing_workers_never_pass_the_daily_budget_and_paused_work_resumes_when_it_is_raised(system, fake):
    # given: 50 images costing 1 each, a daily budget of 20, four workers racing
    budget = system.with_env(IMAGE_COST_PER_CALL="1", IMAGE_DAILY_BUDGET="20", BUDGET_RECHECK_SECONDS="1")
    workers = [budget.start_worker("image") for _ in range(4)]
    with budget.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(50)), budget.cfg, by=EDITOR)
    budget.dispatch()

    def images() -> Counter:
        return Counter(status for (kind, _), status in statuses(budget, saved.content_id, 1).items()
                       if kind == "image")

    wait_until(lambda: images()[("succeeded", None)] == 20 and images()[("retry", "budget")] == 30, timeout=90,
               message="20 images made and 30 paused by the budget")
    # then: exactly 20 calls, and still 20 after the paused tasks looked again several times
    for _ in range(3):
        time.sleep(1.2)
        budget.dispatch()
    assert paid_inputs(fake).total() == 20
    assert images()[("succeeded", None)] == 20
    with budget.db() as conn:
        spent = conn.execute("SELECT spent::float AS spent, calls FROM spend_days").fetchone()
    assert (spent["spent"], spent["calls"]) == (20.0, 20)
    # when: the limit is raised (workers restart with the new setting: stopped as a deploy stops them, each
    # finishing the job it holds, so no task is left to a killed worker's recovery)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(30)
    raised = budget.with_env(IMAGE_DAILY_BUDGET="100")
    for _ in range(4):
        raised.start_worker("image")
    deadline = time.monotonic() + 90
    while images()[("succeeded", None)] < 50:
        assert time.monotonic() < deadline, images()
        raised.dispatch(), raised.reconcile()
        time.sleep(0.3)
    assert paid_inputs(fake).total() == 50


def test_two_contents_with_the_same_blocks_each_get_a_bundle_true_about_itself(system, fake):
    system.start_worker("image"), system.start_worker("tts"), system.start_worker("bundle")
    manifests = []
    for _ in range(2):
        with system.db() as conn:
            saved = versions.save(conn, parse_draft(lesson(2)), system.cfg, by=EDITOR)
        rows = drain(system, saved.content_id)
        bundle = rows[-1]
        path = system.cfg.media_dir / "assets" / bundle["asset_sha256"][:2] / bundle["asset_sha256"]
        manifest = json.loads(zipfile.ZipFile(io.BytesIO(path.read_bytes())).read("manifest.json"))
        manifests.append((saved.content_id, manifest))
    for content_id, manifest in manifests:
        assert (manifest["content_id"], manifest["version"]) == (content_id, 1)
    # the media were made once and reused by the second content
    assert paid_inputs(fake).total() == 4


def test_a_key_honouring_provider_retrying_an_ambiguous_call_is_booked_once(system, fake):
    # given: a provider that honours idempotency keys; the first image call hangs past the read timeout
    honest = system.with_env(IMAGE_HONOURS_IDEMPOTENCY_KEY="true", IMAGE_COST_PER_CALL="2")
    fake.honour_keys(True)
    fake.script(Behaviour("hang", seconds=4, endpoint="image"))
    honest.start_worker("image")
    with honest.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), honest.cfg, by=EDITOR)
        image = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image'",
                             (saved.content_id,)).fetchone()
    honest.dispatch()
    # when: the retry replays the key and gets the first result
    deadline = time.monotonic() + 60
    while honest.task(image["id"])["status"] != "succeeded":
        assert time.monotonic() < deadline, honest.task(image["id"])
        honest.dispatch()
        time.sleep(0.3)
    # then: two ledger rows, one charge
    with honest.db() as conn:
        rows = conn.execute("SELECT outcome, cost::float AS cost FROM provider_calls WHERE task_id = %s ORDER BY id",
                            (image["id"],)).fetchall()
        spent = conn.execute("SELECT spent::float AS spent FROM spend_days").fetchone()["spent"]
    assert [(r["outcome"], r["cost"]) for r in rows] == [("ambiguous", 2.0), ("replayed", 0.0)]
    assert spent == 2.0
