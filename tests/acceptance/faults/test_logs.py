"""A worker's log lines name the task, the lease and the attempt they are about."""

from __future__ import annotations

import json

from pipeline import versions
from pipeline.core.content import parse_draft
from testkit.fakeprovider import Behaviour
from testkit.helpers import EDITOR, lesson


def test_every_job_log_line_carries_the_task_the_lease_and_the_attempt(system, fake):
    # given: an image whose call is refused for good (400) and a narration that succeeds
    fake.script(Behaviour.fail(400, endpoint="image"))
    system.start_worker("image"), system.start_worker("tts")
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(1)), system.cfg, by=EDITOR)
        tasks = {r["kind"]: r for r in conn.execute("SELECT id, kind::text FROM tasks WHERE content_id = %s",
                                                      (saved.content_id,))}
    system.dispatch()
    system.wait_status(tasks["image"]["id"], "failed", timeout=30)
    system.wait_status(tasks["tts"]["id"], "succeeded", timeout=30)
    with system.db() as conn:
        leases = {r["id"]: str(r["lease_token"]) for r in conn.execute(
            "SELECT task_id AS id, lease_token FROM events WHERE to_status = 'running' AND content_id = %s",
            (saved.content_id,))}
    # then: every line about a job names its task, its lease and its attempt, and a failure its error class
    lines = [json.loads(line) for path in system.logs.glob("worker-*.log")
             for line in path.read_text().splitlines() if line.startswith("{")]
    about = [line for line in lines if line.get("event") in ("job_start", "job_end", "attempt_failed")]
    assert {line["event"] for line in about} == {"job_start", "job_end", "attempt_failed"}
    for line in about:
        assert line["lease_token"] == leases[line["task_id"]] and line["attempt"] == 1, line
    failed = next(line for line in about if line["event"] == "attempt_failed")
    assert (failed["task_id"], failed["error"], failed["status"]) == (tasks["image"]["id"], "Permanent", "failed")


def test_no_log_line_carries_the_text_of_a_prompt(system, fake):
    # given: a lesson whose text is marked, one image refused for good (its error body echoes the request) and
    # the rest made, with every process's output kept
    marker = "MARKER-7f3a9c-never-logged"
    fake.script(Behaviour.fail(400, endpoint="image", message=f"Your request was rejected: '{marker} ...'"))
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    with system.db() as conn:
        saved = versions.save(conn, parse_draft(lesson(2, prefix=marker)), system.cfg, by=EDITOR)
        ids = [r["id"] for r in conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind <> 'bundle'",
                                             (saved.content_id,))]
    outputs = [system.dispatch()]
    for task_id in ids:
        system.wait_status(task_id, "failed", "succeeded", timeout=30)
    result = system.reconcile()
    outputs += [result.stdout, result.stderr]
    # then: the prompt reached the provider, and no line of any process carries it
    assert any(marker in json.dumps(r.body, ensure_ascii=False) for r in fake.recorded), "no marked prompt sent"
    logged = [path.read_text() for path in system.logs.glob("*.log")]
    assert logged and all(marker not in text for text in logged + outputs)
