"""Issue 14's "done when", on the stack the README starts (`bin/dev`, running the Procfile's lines)
against fake providers that answer images in 2 s and speech in 1 s, with limits of 4 calls:

* a 12-block lesson goes from save to every task done within 1.2x the ideal ceil(12 / 4) x 2 s,
  and each provider sees exactly 4 concurrent calls at its peak, never more;
* the same lesson saved by an editor behind a bulk import of 50 lessons finishes within 1.5x
  of its time alone;
* the worker processes are RQ's stock `rq worker-pool`, and Ctrl-C leaves no process behind;
* with IMAGE_BULK_BACKEND=batch, the editor's lesson saved while the import's images wait in a Batch API
  job finishes within 1.5x of its time alone, as it does today.
"""

from __future__ import annotations

import json
import time

import pytest

from bin.embedded import free_port
from pipeline.db import connect
from testkit.stack import DevStack, descendants, fake_provider, ideal_seconds, lesson, provider_env

# wall-clock bounds against the ideal the providers' latency allows: bin/test runs them alone, before the rest
pytestmark = [pytest.mark.slow, pytest.mark.timing]

BLOCKS, LIMIT, IMAGE_SECONDS, SPEECH_SECONDS, BACKLOG = 12, 4, 2.0, 1.0, 50


def pools(stack: DevStack) -> dict[str, int]:
    """Worker processes per `rq worker-pool` command line under bin/dev, by their queues."""
    found: dict[str, int] = {}
    for pid in descendants(stack.proc.pid):
        try:
            argv = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")[:-1]
            parent = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
            parent_argv = open(f"/proc/{parent}/cmdline", "rb").read().split(b"\0")[:-1]
        except OSError:
            continue
        if b"worker-pool" in argv and parent_argv == argv:     # a worker forked by its pool
            queues = " ".join(a.decode() for a in argv[argv.index(b"-n") + 2:])
            found[queues] = found.get(queues, 0) + 1
    return found


def wait_in_flight(fake, endpoint: str, n: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while fake.in_flight(endpoint) < n:
        assert time.monotonic() < deadline, f"never {n} {endpoint} calls in flight"
        time.sleep(0.02)


def import_backlog(stack: DevStack, tmp_path) -> None:
    """BACKLOG bulk lessons through `bin/import`, as an operator imports a file; the import must succeed."""
    backlog = tmp_path / "backlog.jsonl"
    backlog.write_text("".join(json.dumps(lesson(BLOCKS, f"bulk-{i}"), ensure_ascii=False) + "\n"
                               for i in range(BACKLOG)))
    imported = stack.run_import(backlog)
    assert imported.returncode == 0, imported.stderr[-2000:]


def test_the_readme_stack_keeps_the_providers_busy_and_editors_first(database_url, redis_url, tmp_path):
    image, speech = fake_provider(IMAGE_SECONDS), fake_provider(SPEECH_SECONDS)
    # the paid calls' makespan against the ideal their latency allows: the lesson video's render, local work after
    # them, is measured on its own (bench/video_render.py)
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", VIDEO_ENABLED="false",
                           **provider_env(image, speech, LIMIT))
    left = None
    try:
        stack.wait_ready()
        # the workers: RQ's own worker pools, as many workers per kind as the provider may serve at once, one of
        # them listening to the interactive queue only
        assert pools(stack) == {"image image-bulk": LIMIT - 1, "image": 1, "tts tts-bulk": LIMIT - 1, "tts": 1,
                                "bundle bundle-bulk": 1, "bundle": 1, "video video-bulk": 1, "webhook": 2}
        stack.wait_done(stack.save(lesson(2, "warm-up"))[1]["content_id"])

        # a 12-block lesson alone
        started, body = stack.save(lesson(BLOCKS, "alone"))
        done = stack.wait_done(body["content_id"])
        alone = done["ended"] - started
        ideal = ideal_seconds(BLOCKS, LIMIT, IMAGE_SECONDS, SPEECH_SECONDS)
        assert done["statuses"] == ["succeeded"]
        assert alone <= 1.2 * ideal, f"save to all done {alone:.2f} s, ideal {ideal} s\n{stack.tail()}"
        assert (image.max_in_flight("image"), speech.max_in_flight("audio")) == (LIMIT, LIMIT)

        # the same lesson, saved by an editor while 50 bulk lessons keep every image worker busy
        import_backlog(stack, tmp_path)
        wait_in_flight(image, "image", LIMIT - 1)   # every slot the bulk lane may hold; one is held back
        started, body = stack.save(lesson(BLOCKS, "editor"))
        done = stack.wait_done(body["content_id"])
        behind = done["ended"] - started
        assert done["statuses"] == ["succeeded"]
        assert behind <= 1.5 * alone, f"behind the backlog {behind:.2f} s, alone {alone:.2f} s\n{stack.tail()}"
        # the bulk work was still there: the editor's lesson went ahead of it
        with connect(database_url, autocommit=True) as conn:
            waiting = conn.execute("SELECT count(*) AS n FROM tasks t JOIN versions v USING (content_id, version) "
                                   "WHERE v.lane = 'bulk' AND t.status IN ('ready', 'retry')").fetchone()["n"]
        assert waiting > 100
        print(f"alone {alone:.2f} s ({alone / ideal:.2f}x the ideal {ideal} s); behind {BACKLOG} bulk lessons "
              f"{behind:.2f} s ({behind / alone:.2f}x alone)")
        # never more calls at once than the limit, whatever the load
        assert (image.max_in_flight("image"), speech.max_in_flight("audio")) == (LIMIT, LIMIT)
    finally:
        left = stack.stop()
        image.stop()
        speech.stop()
    # Ctrl-C stopped bin/dev and every process it started
    assert stack.proc.returncode == 0, stack.tail()
    assert left == []


def test_an_editors_lesson_is_as_fast_while_a_bulk_import_waits_in_a_batch(database_url, redis_url, tmp_path):
    image, speech = fake_provider(IMAGE_SECONDS), fake_provider(SPEECH_SECONDS)
    image.batch.script.seconds = 3600   # the import's batch is still pending when the editor saves
    env = dict(provider_env(image, speech, LIMIT), IMAGE_BULK_BACKEND="batch", IMAGE_BATCH_GATHER_SECONDS="1",
               IMAGE_BATCH_POLL_SECONDS="1")
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", **env)
    left = None
    try:
        stack.wait_ready()
        stack.wait_done(stack.save(lesson(2, "warm-up"))[1]["content_id"])
        started, body = stack.save(lesson(BLOCKS, "alone"))
        alone = stack.wait_done(body["content_id"])["ended"] - started

        import_backlog(stack, tmp_path)
        deadline = time.monotonic() + 120
        while image.batch.created == 0:
            assert time.monotonic() < deadline, f"no batch was created\n{stack.tail()}"
            time.sleep(0.05)
        started, body = stack.save(lesson(BLOCKS, "editor"))
        done = stack.wait_done(body["content_id"])
        behind = done["ended"] - started
        assert done["statuses"] == ["succeeded"]
        assert behind <= 1.5 * alone, f"behind the batch {behind:.2f} s, alone {alone:.2f} s\n{stack.tail()}"
        # the import's images went to the Batch API, not to the synchronous endpoint the editor's used
        with connect(database_url, autocommit=True) as conn:
            in_batches = conn.execute("SELECT count(*) AS n FROM batch_lines WHERE outcome IS NULL").fetchone()["n"]
        assert in_batches > 0 and image.max_in_flight("image") <= LIMIT
        print(f"alone {alone:.2f} s; while {in_batches} bulk images wait in a batch {behind:.2f} s "
              f"({behind / alone:.2f}x alone)")
    finally:
        left = stack.stop()
        image.stop()
        speech.stop()
    assert stack.proc.returncode == 0, stack.tail()
    assert left == []
