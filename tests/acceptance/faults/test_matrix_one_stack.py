"""The fault matrix's rows that kill nothing and change no setting, on one stack for the module.

A whole stack (gunicorn, the dispatcher, a reconciler loop, one worker per kind, its own Valkey) takes seconds of
CPU to start, and each of these rows then runs in about one. So they share a stack and its fake provider, each on
a content of its own whose texts no other row saves (an input made before would be reused, not called); between
rows the stack is left idle: no media task waiting or running, no call in flight, the fake's scripts and
counters forgotten. Under -n the module's tests go to one process (tests/conftest.py, ONE_PROCESS), so the stack
starts once. The rows that kill a process, stop Redis, restart PostgreSQL or need other settings start stacks of
their own (test_matrix.py, test_drills.py).
"""

import pytest

from pipeline.core.records import idempotency_key
from pipeline.core import kinds
from pipeline.core.states import PENDING
from testkit.fakeprovider import Behaviour, FakeProviderServer
from testkit.helpers import lesson, wait_until
from testkit.system import System, settle, start_stack, stop_stack, system_env


@pytest.fixture(scope="module")
def fake():
    with FakeProviderServer() as server:
        yield server


@pytest.fixture(scope="module")
def one_stack(module_database_url, fake, tmp_path_factory):
    base = tmp_path_factory.mktemp("one-stack")
    (base / "logs").mkdir()
    # the stack runs its own Valkey: REDIS_URL is set by start_stack
    system = System(system_env(module_database_url, "redis://127.0.0.1:1/0", base / "media", fake.base_url),
                    base / "logs")
    built = start_stack(system, base / "redis", owner="editor-0")
    yield built
    system.stop()
    stop_stack(built)


@pytest.fixture
def stack(one_stack, fake):
    """The module's stack for one row, idle and with a fresh fake; left idle again afterwards."""
    fake.reset()
    yield one_stack
    fake.release()

    def idle() -> bool:
        with one_stack.system.db() as conn:
            waiting = conn.execute("SELECT count(*) AS n FROM tasks WHERE kind::text = ANY(%s) "
                                   "AND status::text = ANY(%s)", (list(kinds.paid_names()), [s.value for s in PENDING]),
                                   ).fetchone()["n"]
        return waiting == 0 and fake.in_flight("image") == 0 and fake.in_flight("audio") == 0
    wait_until(idle, timeout=60, interval=0.1, message="the shared stack idle after the row")


def key(row):
    return idempotency_key(row["fingerprint"], row["id"])


def events(stack, task_id):
    with stack.system.db() as conn:
        return conn.execute("SELECT * FROM events WHERE task_id = %s ORDER BY id", (task_id,)).fetchall()


def test_a_429_with_retry_after_waits_without_spending_an_attempt(stack, fake):
    fake.script(Behaviour.fail(429, retry_after=1, endpoint="image"))
    saved = stack.save(lesson(1, prefix="429 "))
    image = settle(stack, saved["content_id"])[0]
    assert (image["status"], image["attempts"]) == ("succeeded", 1)
    history = events(stack, image["id"])
    busy = [e for e in history if e["to_status"] == "retry"]
    assert len(busy) == 1 and busy[0]["reason"].startswith("busy")
    waited = (history[-1]["at"] - busy[0]["at"]).total_seconds()
    assert waited >= 0.9


def test_a_400_from_the_provider_fails_at_once_with_a_dead_letter(stack, fake):
    fake.script(Behaviour.fail(400, message="prompt violates policy", endpoint="image"))
    saved = stack.save(lesson(1, prefix="400 "))
    rows = settle(stack, saved["content_id"], done=("succeeded", "failed", "ready"))
    image = stack.system.wait_status(rows[0]["id"], "failed")
    assert image["attempts"] == 1 and "prompt violates policy" in image["last_error"]
    with stack.system.db() as conn:
        letter = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s", (image["id"],)).fetchone()
    assert letter["reason"] == "permanent error" and "prompt violates policy" in letter["last_error"]
    assert fake.calls_for(key(image)).requests == 1


def test_a_new_version_while_the_old_runs_supersedes_it_and_only_the_new_is_delivered(stack, fake):
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    first = stack.save(lesson(1, prefix="superseded "))
    wait_until(lambda: fake.in_flight("image") == 1, message="old image in flight")
    body = {**lesson(1, prefix="superseded 新"), "base_version": 1}
    second = stack.api("PUT", f"/api/contents/{first['content_id']}", body)
    assert second.status_code == 202
    fake.release()
    rows = settle(stack, first["content_id"])
    old = [r for r in rows if r["version"] == 1]
    assert {r["status"] for r in old} <= {"superseded", "succeeded"} and old[0]["status"] == "superseded"
    assert stack.api("POST", f"/api/contents/{first['content_id']}/versions/2/approve").status_code == 200
    delivery = stack.api("GET", f"/api/contents/{first['content_id']}/delivery").json()
    new_assets = {r["asset_sha256"] for r in rows if r["version"] == 2}
    delivered = {b[label]["sha256"] for b in delivery["blocks"] for label in ("image", "audio")}
    assert delivery["version"] == 2 and delivered <= new_assets


def test_approving_an_incomplete_version_is_409_and_delivery_stays_as_it_was(stack, fake):
    saved = stack.save(lesson(1, prefix="incomplete "))
    settle(stack, saved["content_id"])
    assert stack.api("POST", f"/api/contents/{saved['content_id']}/versions/1/approve").status_code == 200
    before = stack.api("GET", f"/api/contents/{saved['content_id']}/delivery").json()
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    update = stack.api("PUT", f"/api/contents/{saved['content_id']}", {**lesson(1, prefix="incomplete 改"),
                                                                            "base_version": 1})
    assert update.status_code == 202
    refused = stack.api("POST", f"/api/contents/{saved['content_id']}/versions/2/approve")
    assert refused.status_code == 409
    assert stack.api("GET", f"/api/contents/{saved['content_id']}/delivery").json() == before
    fake.release()


def test_an_editor_retrying_an_unknown_accepts_the_risk_and_the_second_call_is_recorded(stack, fake):
    fake.script(Behaviour("hang", seconds=3, endpoint="image"))
    saved = stack.save(lesson(1, prefix="unknown "))
    image_id = stack.api("GET", f"/api/contents/{saved['content_id']}/versions/1").json()["tasks"][0]["id"]
    image = stack.system.wait_status(image_id, "unknown")
    refused = stack.api("POST", f"/api/tasks/{image_id}/retry", {})
    assert refused.status_code == 409 and "duplicate" in refused.json()["error"]["message"]
    accepted = stack.api("POST", f"/api/tasks/{image_id}/retry", {"accept_duplicate_risk": True})
    assert accepted.status_code == 202
    rows = settle(stack, saved["content_id"])
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    assert fake.calls_for(key(image)).executions == 2
    consent = [e for e in events(stack, image_id) if e["action"] == "duplicate_risk_accepted"]
    assert len(consent) == 1 and consent[0]["actor"] == "editor-0"
    # the spend report lists the second charge with who consented to it
    spend = stack.api("GET", f"/api/contents/{saved['content_id']}/spend").json()
    assert [(d["task_id"], d["outcome"], d["consented_by"]) for d in spend["duplicates"]] == \
        [(image_id, "succeeded", "editor-0")]
    assert spend["totals"]["paid_calls"] == 3   # the ambiguous image call, its consented repeat, the narration
