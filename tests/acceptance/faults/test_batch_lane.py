"""The bulk lane's images through the Batch API (IMAGE_BULK_BACKEND=batch), with real workers, a real batcher
process killed with SIGKILL at each of its crash points, and the strict fake's Files and Batch API."""


import pytest

from pipeline import versions
from pipeline.core.content import parse_draft
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, IMPORTER, wait_until
from testkit.system import kill

BATCH = {"IMAGE_BULK_BACKEND": "batch", "IMAGE_BATCH_GATHER_SECONDS": "0.5", "IMAGE_BATCH_POLL_SECONDS": "0.2"}


def bulk_lesson(system, blocks=4, prefix="", texts=None):
    texts = texts or [f"{prefix}Bulk part {i}: the water cycle." for i in range(blocks)]
    body = {"title": "Import", "locale": "en-US", "blocks": [{"key": f"b{i}", "text": t} for i, t in enumerate(texts)]}
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(body), system.cfg, by=IMPORTER, lane="bulk")
    return saved.content_id


def images(system, content_id):
    with system.db() as conn:
        return conn.execute("SELECT * FROM tasks WHERE content_id = %s AND kind = 'image' ORDER BY id",
                            (content_id,)).fetchall()


def start(system, batcher=True):
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    dispatcher = system._spawn([str(system_root() / "bin" / "dispatch")], "dispatcher")
    system.workers.append(dispatcher)
    return start_batcher(system) if batcher else None


def start_batcher(system):
    proc = system._spawn([str(system_root() / "bin" / "batches")], "batcher")
    system.workers.append(proc)
    return proc


def system_root():
    from testkit.system import ROOT
    return ROOT


def all_settled(system, content_id, timeout=60, kinds=("image", "tts", "bundle")):
    done = ("succeeded", "failed", "unknown")

    def settled():
        found = rows(system, content_id, kinds)
        return found if found and all(r["status"] in done for r in found) else None
    return wait_until(settled, timeout=timeout, message=f"every task of content {content_id} settled")


def rows(system, content_id, kinds=("image", "tts", "bundle")):
    with system.db() as conn:
        return conn.execute("SELECT * FROM tasks WHERE content_id = %s AND kind::text = ANY(%s) ORDER BY id",
                            (content_id, list(kinds))).fetchall()


def executions(fake, tasks):
    return [fake.calls_for(idempotency_key(t["fingerprint"], t["id"])).executions for t in tasks]


@pytest.mark.server_major
def test_bulk_images_go_into_one_batch_and_are_paid_at_half_the_price(system, fake):
    system = system.with_env(**ONE_BATCH)   # the four lines are sent when all four are in, however slow the saves
    content = bulk_lesson(system, blocks=4)
    start(system)
    settled = all_settled(system, content)
    assert {r["status"] for r in settled} == {"succeeded"}
    assert fake.batch.created == 1 and fake.in_flight("image") == 0
    assert fake.max_in_flight("image") == 0                 # no bulk image was called synchronously
    assert executions(fake, images(system, content)) == [1, 1, 1, 1]
    with system.db() as conn:
        ledger = conn.execute("SELECT * FROM provider_calls WHERE batch_id IS NOT NULL ORDER BY id").fetchall()
        spent = conn.execute("SELECT sum(spent)::float AS s FROM spend_days WHERE provider = 'openai-image'"
                             ).fetchone()["s"]
    assert len(ledger) == 4 and all(r["outcome"] == "succeeded" and r["usage"] for r in ledger)
    ratio = sum(float(r["cost"]) for r in ledger) / sum(float(r["list_cost"]) for r in ledger)
    assert 0.45 < ratio < 0.55, ratio                       # the batch discount, on the reported usage
    assert spent == pytest.approx(sum(float(r["cost"]) for r in ledger), abs=1e-6)   # the booking was settled


ONE_BATCH = {**BATCH, "IMAGE_BATCH_MAX_LINES": "4", "IMAGE_BATCH_GATHER_SECONDS": "300"}   # all four, at once


def killed_at_a_provider_step(system, fake, step):
    """The step is done at the provider and its answer held: the batcher dies right there."""
    fake.script(Behaviour("hold", seconds=60, endpoint=step))
    batcher = start(system)
    wait_until(lambda: any(r.endpoint == step for r in fake.recorded), timeout=60,
               message=f"the batcher reaching {step}")
    kill(batcher)
    fake.release()


def killed_while_recording(system, fake):
    """The result file is read, and the first line's settlement waits on a lock: the batcher dies there."""
    batcher = start(system)
    with system.db() as conn:
        wait_until(lambda: conn.execute("SELECT 1 FROM image_batches WHERE status = 'submitted'").fetchone(),
                   timeout=60, message="the batch submitted")
    with system.holding("LOCK TABLE batch_lines IN SHARE MODE"):
        wait_until(lambda: any(r.endpoint == "files.content" for r in fake.recorded), timeout=60,
                   message="the output file read")
        system.waiting_on_lock()
        kill(batcher)


@pytest.mark.parametrize("crash", ["files.create", "batches.create", "batches.get", "recording"])
def test_a_batcher_killed_at_each_crash_point_creates_no_second_batch_and_pays_each_input_once(system, fake,
                                                                                              crash):
    system = system.with_env(**ONE_BATCH)
    content = bulk_lesson(system, blocks=4)
    if crash == "recording":
        killed_while_recording(system, fake)
    else:
        killed_at_a_provider_step(system, fake, crash)
    start_batcher(system)
    settled = all_settled(system, content)
    assert {r["status"] for r in settled} == {"succeeded"}   # every image delivered, and the bundle made
    assert fake.batch.created == 1                            # found by its name, never created twice
    inputs = [f for f in fake.batch.files.values() if f["purpose"] == "batch"]
    assert len(inputs) == 1                                   # one input file: found by its name, not uploaded again
    image_rows = [r for r in settled if r["kind"] == "image"]
    assert executions(fake, image_rows) == [1, 1, 1, 1]
    with system.db() as conn:
        lines = conn.execute("SELECT fingerprint, count(*)::int AS n FROM batch_lines GROUP BY 1").fetchall()
        ledger = conn.execute("SELECT idempotency_key, count(*)::int AS n FROM provider_calls "
                              "WHERE batch_id IS NOT NULL GROUP BY 1").fetchall()
    assert len(lines) == 4 and all(r["n"] == 1 for r in lines)     # one line per distinct input
    assert len(ledger) == 4 and all(r["n"] == 1 for r in ledger)   # each line booked once


def test_a_prompt_the_safety_system_refuses_in_a_batch_is_a_refusal_for_a_person(system, fake):
    system = system.with_env(**ONE_BATCH)
    content = bulk_lesson(system, texts=[f"Bulk part {i}." for i in range(3)] + ["A FORBIDDEN picture."])
    start(system)
    settled = all_settled(system, content, kinds=("image", "tts"))   # the bundle waits on the refused image
    image_rows = [r for r in settled if r["kind"] == "image"]
    assert [r["status"] for r in image_rows] == ["succeeded"] * 3 + ["failed"]
    assert image_rows[-1]["last_error_code"] == "refused" and "safety system" in image_rows[-1]["last_error"]
    with system.db() as conn:
        listed = conn.execute("SELECT problem FROM tasks_needing_attention WHERE id = %s",
                              (image_rows[-1]["id"],)).fetchone()
        refused = conn.execute("SELECT outcome, cost::float AS cost FROM provider_calls WHERE task_id = %s",
                               (image_rows[-1]["id"],)).fetchone()
    assert listed["problem"] == "refused" and refused == {"outcome": "refused", "cost": 0.0}


def test_an_expired_batch_keeps_what_it_finished_and_sends_the_rest_again_without_charging_it(system, fake):
    system = system.with_env(**BATCH)
    fake.batch.script.expire_after = 2
    content = bulk_lesson(system, blocks=4)
    # the batcher starts once the four lines are written, so that it gathers them into one batch: started with the
    # workers, it gathered two, then one, then one on a loaded machine, and no batch had more than the two lines the
    # provider runs before it expires the batch
    start(system, batcher=False)
    with system.db() as conn:
        wait_until(lambda: conn.execute("SELECT count(*) AS n FROM batch_lines").fetchone()["n"] == 4, timeout=60,
                   message="the four images' batch lines written")
    start_batcher(system)
    wait_until(lambda: fake.batch.created >= 1 and any(
        b.obj["status"] == "expired" for b in fake.batch.batches.values()), timeout=60, message="the expiry")
    fake.batch.script.expire_after = None
    settled = all_settled(system, content)
    image_rows = [r for r in settled if r["kind"] == "image"]
    assert {r["status"] for r in image_rows} == {"succeeded"}
    # the lines it never ran went out again in a batch of their own (or two, when they reach the batcher in two
    # gatherings), and each input was made once
    assert fake.batch.created in (2, 3) and executions(fake, image_rows) == [1, 1, 1, 1]
    assert [r["attempts"] for r in image_rows] == [1, 1, 1, 1]   # the lines it never ran spent no attempt
    with system.db() as conn:
        outcomes = conn.execute("SELECT outcome, count(*)::int AS n FROM batch_lines GROUP BY 1").fetchall()
        in_expired = conn.execute("SELECT l.outcome, count(*)::int AS n FROM batch_lines l JOIN image_batches b "
                                  "ON b.id = l.batch_id WHERE b.provider_status = 'expired' GROUP BY 1").fetchall()
        charged = conn.execute("SELECT count(*)::int AS n FROM provider_calls WHERE cost > 0 AND batch_id IS NOT NULL"
                               ).fetchone()["n"]
    # the expired batch, of all four lines, ran two and sent back the other two; each line sent back ran once later
    assert {r["outcome"]: r["n"] for r in in_expired} == {"succeeded": 2, "requeued": 2}
    assert {r["outcome"]: r["n"] for r in outcomes} == {"succeeded": 4, "requeued": 2}
    assert charged == 4


def test_a_batch_that_fails_validation_sends_every_line_back_with_the_reason(system, fake):
    # the three lines are sent when all three are in, the first time and when they come back: gathered as they came,
    # a loaded machine's run sent them in three batches
    system = system.with_env(**{**BATCH, "IMAGE_BATCH_MAX_LINES": "3", "IMAGE_BATCH_GATHER_SECONDS": "300"})
    fake.batch.script.fail_validation = 1
    content = bulk_lesson(system, blocks=3)
    start(system)
    settled = all_settled(system, content)
    image_rows = [r for r in settled if r["kind"] == "image"]
    assert {r["status"] for r in image_rows} == {"succeeded"}
    assert fake.batch.created == 2 and executions(fake, image_rows) == [1, 1, 1]
    statuses = [b.obj["status"] for b in sorted(fake.batch.batches.values(), key=lambda b: b.obj["created_at"])]
    assert sorted(statuses) == ["completed", "failed"]
    with system.db() as conn:
        failed = conn.execute("SELECT error FROM image_batches WHERE provider_status = 'failed'").fetchall()
        said = conn.execute("SELECT reason AS error FROM events WHERE to_status = 'retry' AND task_id = ANY(%s)",
                            ([r["id"] for r in image_rows],)).fetchall()
        charged = conn.execute("SELECT count(*)::int AS n FROM provider_calls WHERE cost > 0 AND batch_id IS NOT NULL"
                               ).fetchone()["n"]
    assert len(failed) == 1 and "token_limit_exceeded" in failed[0]["error"]
    assert len(said) == 3 and all("token_limit_exceeded" in r["error"] for r in said)
    assert charged == 3   # the failed batch ran nothing and cost nothing


def test_a_batch_whose_work_was_superseded_is_cancelled_at_the_provider(system, fake):
    system = system.with_env(**BATCH)
    fake.batch.script.seconds = 3600   # it would take an hour
    content = bulk_lesson(system, blocks=2, prefix="old ")
    start(system)
    wait_until(lambda: fake.batch.created == 1, timeout=60, message="the first batch")
    with system.db() as conn:   # the import is saved again with other texts: the first version's work is superseded
        body = {"title": "Import", "locale": "en-US",
                "blocks": [{"key": f"b{i}", "text": f"new part {i}"} for i in range(2)]}
        versions.save(conn, parse_draft(body), system.cfg, by=IMPORTER, content_id=content, base_version=1,
                      lane="bulk")
    first = next(iter(fake.batch.batches.values()))
    wait_until(lambda: first.obj["status"] == "cancelled", timeout=60, message="the cancel at the provider")
    with system.db() as conn:
        wait_until(lambda: conn.execute("SELECT count(*)::int AS n FROM batch_lines WHERE batch_id = 1 "
                                        "AND settled_at IS NULL").fetchone()["n"] == 0, timeout=30,
                   message="the cancelled batch's lines settled")
        booked = conn.execute("SELECT coalesce(sum(spent), 0)::float AS s FROM spend_days "
                              "WHERE provider = 'openai-image'").fetchone()["s"]
        second = conn.execute("SELECT sum(estimate)::float AS s FROM batch_lines WHERE settled_at IS NULL"
                              ).fetchone()["s"]
    assert booked == pytest.approx(second or 0.0, abs=1e-6)   # what the cancelled lines booked was given back


def test_an_editors_save_finishes_while_a_bulk_batch_is_pending(system, fake):
    system = system.with_env(**BATCH)
    fake.batch.script.seconds = 3600
    bulk = bulk_lesson(system, blocks=3)
    start(system)
    wait_until(lambda: fake.batch.created == 1, timeout=60, message="the bulk batch")
    with system.db() as conn:
        body = {"title": "Now", "locale": "en-US", "blocks": [{"key": "a", "text": "An editor's block."}]}
        editor = versions.save(conn, parse_draft(body), system.cfg, by=EDITOR).content_id
    assert {r["status"] for r in all_settled(system, editor, timeout=30)} == {"succeeded"}
    assert {r["status"] for r in images(system, bulk)} == {"running"}   # still in their batch


def test_a_refused_prompt_is_not_sent_again_unchanged_until_a_person_asks(system, fake):
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    with system.db() as conn:
        body = {"title": "T", "locale": "en-US", "blocks": [{"key": "a", "text": "A FORBIDDEN scene."}]}
        saved = versions.save(conn, parse_draft(body), system.cfg, by=EDITOR)
    system.dispatch()
    first = wait_until(lambda: (r := images(system, saved.content_id)[0])["status"] == "failed" and r, timeout=30,
                       message="the refusal")
    assert first["last_error_code"] == "refused"
    key = idempotency_key(first["fingerprint"], first["id"])
    assert fake.calls_for(key).requests == 1 and fake.calls_for(key).executions == 0
    with system.db() as conn:   # the same block saved again (its narration changed): the image input is unchanged
        body["blocks"][0]["text"] = "A FORBIDDEN scene."
        body["title"] = "T2"
        again = versions.save(conn, parse_draft(body), system.cfg, by=EDITOR, content_id=saved.content_id,
                              base_version=1)
        listed = conn.execute("SELECT problem FROM tasks_needing_attention WHERE id = %s", (first["id"],)).fetchone()
    assert listed is None or listed["problem"] == "refused"
    system.dispatch()
    second = wait_until(lambda: (r := images(system, again.content_id)[-1])["status"] == "failed" and r,
                        timeout=30, message="the second version's refusal")
    assert second["last_error_code"] == "refused"
    assert fake.calls_for(idempotency_key(second["fingerprint"], second["id"])).requests == 0   # not sent
    from pipeline import review
    with system.db() as conn:   # a person asks for it again: it is sent, and refused again
        review.retry(conn, second["id"], system.cfg, by=EDITOR)
        event = conn.execute("SELECT details FROM events WHERE task_id = %s AND action = 'manual_retry'",
                             (second["id"],)).fetchone()
    assert event["details"]["refusal_overridden"]["task_id"] == first["id"]
    system.dispatch()
    wait_until(lambda: fake.calls_for(idempotency_key(second["fingerprint"], second["id"])).requests == 1,
               timeout=30, message="the call a person asked for")


def test_a_repeated_input_waits_for_its_batch_line_and_reuses_the_asset_without_spending_an_attempt(system, fake):
    # given: leases of 1 s, retries within half a second, and batches that stay in progress for 8 s
    system = system.with_env(**BATCH, LEASE_SECONDS="1", HEARTBEAT_SECONDS="0.3")
    fake.batch.script.seconds = 8
    # and three lessons saved within a second, the last block of each repeating the first of the lesson before
    lessons = []
    for n in range(3):
        texts = [f"Lesson {n}, part {j}: the water cycle." for j in range(4)]
        if n:
            texts[-1] = f"Lesson {n - 1}, part 0: the water cycle."
        lessons.append(bulk_lesson(system, texts=texts))
    # when: the workers, the batcher and the reconciler run
    start(system)
    system.workers.append(system._spawn([str(system_root() / "bin" / "reconcile"), "--loop", "0.5"], "reconciler"))
    media = [all_settled(system, content, timeout=60, kinds=("image", "tts")) for content in lessons]
    # then: nothing failed for waiting, and every lesson is deliverable
    assert [(r["id"], r["status"], r["attempts"], r["last_error"]) for rows in media for r in rows
            if r["status"] != "succeeded"] == []
    settled = [all_settled(system, content, timeout=30) for content in lessons]
    assert [{r["status"] for r in rows} for rows in settled] == [{"succeeded"}] * 3
    image_rows = [r for rows in settled for r in rows if r["kind"] == "image"]
    ids = [r["id"] for r in image_rows]
    with system.db() as conn:
        lines = conn.execute("SELECT task_id, fingerprint FROM batch_lines").fetchall()
        parks = conn.execute("SELECT task_id, count(*)::int AS n, min(at) AS at FROM events WHERE to_status = 'retry' "
                             "AND reason LIKE 'busy (WaitingForInput:%%' AND task_id = ANY(%s) GROUP BY 1", (ids,)
                             ).fetchall()
        ended = conn.execute("SELECT task_id, at FROM events WHERE to_status = 'succeeded' AND task_id = ANY(%s)",
                             (ids,)).fetchall()
        most = conn.execute("SELECT max(attempt)::int AS n FROM events WHERE task_id = ANY(%s)", (ids,)).fetchone()["n"]
        reused = conn.execute("SELECT task_id FROM provider_calls WHERE outcome = 'reused' AND task_id = ANY(%s)",
                              (ids,)).fetchall()
    # one batch line per distinct input, each run once at the provider
    assert len(lines) == len({line["fingerprint"] for line in lines}) == len({r["fingerprint"] for r in image_rows}) == 10
    holders = {line["fingerprint"]: line["task_id"] for line in lines}
    assert executions(fake, image_rows) == [int(r["id"] == holders[r["fingerprint"]]) for r in image_rows]
    waiters = [r for r in image_rows if holders[r["fingerprint"]] != r["id"]]
    assert len(waiters) == 2
    parked = {p["task_id"]: p for p in parks}
    done_at = {e["task_id"]: e["at"] for e in ended}
    by_id = {r["id"]: r for r in image_rows}
    for waiter in waiters:
        # it parked while its holder's line was in a batch, and its holder's settlement woke it (not a timer) ...
        assert waiter["id"] in parked and parked[waiter["id"]]["n"] <= 2
        # ... after longer than its lease and retry windows (LEASE_SECONDS 1 + BACKOFF_CAP_SECONDS 0.5)
        assert (done_at[waiter["id"]] - parked[waiter["id"]]["at"]).total_seconds() > 1.5
        # ... spent no attempt waiting, and reused the holder's asset without a paid call of its own
        assert waiter["attempts"] == 1
        assert waiter["asset_sha256"] == by_id[holders[waiter["fingerprint"]]]["asset_sha256"]
    assert most == 1                                              # no image task ever ran a second attempt
    assert sorted(r["task_id"] for r in reused) == sorted(w["id"] for w in waiters)


def test_a_line_whose_paid_answer_is_unusable_keeps_its_input_so_a_repeat_waits_instead_of_paying_again(system,
                                                                                                         fake):
    # given: batches whose first line is run (and charged) but answers bytes that are no image
    system = system.with_env(**BATCH)
    fake.batch.script.unusable_every = 1
    first = bulk_lesson(system, texts=["The water cycle, once."])
    start(system)
    holder = wait_until(lambda: next((r for r in images(system, first) if r["status"] == "unknown"), None),
                        timeout=60, message="the holder's outcome is unknown")
    # when: a lesson repeating that input is saved after the unknown outcome
    fake.batch.script.unusable_every = None
    second = bulk_lesson(system, texts=["The water cycle, once.", "Another part."])
    wait_until(lambda: images(system, second)[1]["status"] == "succeeded", timeout=60,
               message="the other part of the second lesson succeeded")
    # then: the repeat waits for a person's decision about the first call; it made no line and no call of its own
    repeat = images(system, second)[0]
    assert repeat["status"] in ("ready", "retry") and repeat["attempts"] == 0, repeat
    with system.db() as conn:
        lines = conn.execute("SELECT task_id FROM batch_lines WHERE fingerprint = %s", (holder["fingerprint"],)
                             ).fetchall()
    assert [line["task_id"] for line in lines] == [holder["id"]]
    assert executions(fake, [holder, repeat]) == [1, 0]
