"""Issue 52's webhooks, on the stack the README starts (`bin/dev`, the Procfile's lines: the webhook pool among
them), driven over its HTTP API and `bin/webhooks`, to a real receiver on 127.0.0.1 that verifies every message
with the `standardwebhooks` library:

* a save's completion, its approval and its withdrawal arrive as version.completed, version.deliverable and
  version.withdrawn, each once, in that order; the receiver answering 500 three times then 200 gets the same
  webhook-id each time;
* SIGKILL of the webhook worker while its request is in flight, and of the dispatcher while its enqueue is in
  flight, loses nothing: the message arrives, with the same webhook-id;
* a receiver answering 410 has its endpoint disabled; a private address is refused at registration.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import redis

from bin.embedded import free_port
from pipeline import keys
from pipeline.db import connect
from testkit.helpers import wait_until
from testkit.receiver import HOLD, Receiver
from testkit.stack import DevStack, descendants, lesson

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
ENV = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8", "WEBHOOK_WORKERS": "1", "WEBHOOK_TIMEOUT_SECONDS": "2",
       "WEBHOOK_BACKOFF_BASE_SECONDS": "0.2", "WEBHOOK_BACKOFF_CAP_SECONDS": "0.5", "LOST_DISPATCH_SECONDS": "2",
       "DISPATCH_CLAIM_SECONDS": "2", "IMAGE_WORKERS": "1", "TTS_WORKERS": "1"}


def processes(stack: DevStack, word: bytes) -> list[tuple[int, int]]:
    """(pid, parent pid) of bin/dev's processes whose command line holds `word`."""
    found = []
    for pid in descendants(stack.proc.pid):
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes()
            parent = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            continue
        if word in argv:
            found.append((pid, parent))
    return found


def webhook_worker(stack: DevStack) -> int:
    """The pid of the webhook pool's one worker (forked by the pool, whose command line it shares)."""
    found = processes(stack, b"bin.worker.WebhookWorker")
    pids = {pid for pid, _ in found}
    [worker] = [pid for pid, parent in found if parent in pids]
    return worker


def bin_webhooks(stack: DevStack, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "bin" / "webhooks"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**stack.env, "PATH": os.environ["PATH"]})


def rows(stack: DevStack, endpoint: int) -> list[dict]:
    with connect(stack.env["DATABASE_URL"], autocommit=True) as conn:
        return conn.execute("SELECT d.*, e.type FROM webhook_deliveries d JOIN webhook_events e ON e.id = d.event_id "
                            "WHERE d.endpoint_id = %s ORDER BY d.id", (endpoint,)).fetchall()


def test_a_receiver_gets_every_event_once_signed_through_failures_and_killed_senders(database_url, redis_url,
                                                                                     tmp_path):
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", **ENV)
    with connect(database_url, autocommit=True) as conn:
        reviewer = keys.create(conn, "reviewer@stack", "reviewer")[1]
    receiver, gone = Receiver().start(), Receiver().start()
    try:
        stack.wait_ready()
        # a private address is refused at registration, and nothing is registered
        refused = bin_webhooks(stack, "add", "https://10.1.2.3/hooks", "--team", "default", "--by", "ops")
        assert refused.returncode == 1 and "private address" in refused.stderr, refused.stderr
        added = bin_webhooks(stack, "add", receiver.url, "--team", "default", "--by", "ops", "--events",
                             "version.completed,version.deliverable,version.withdrawn")
        assert added.returncode == 0, added.stderr
        endpoint = int(added.stdout.split()[2])
        receiver.secret = added.stdout.strip().splitlines()[-1]

        def api(method: str, path: str, **kw):
            import requests
            response = requests.request(method, stack.url + path, timeout=30, headers={"X-API-Key": reviewer}, **kw)
            assert response.status_code == 200, response.text
            return response.json()

        def arrived(event: str, n: int = 1):
            return wait_until(lambda: len([m for m in receiver.messages() if m.type == event]) >= n, timeout=60,
                              message=f"{n} {event} delivered\n{stack.tail()}")

        # given a receiver that answers 500 three times, then 200: a lesson made, approved, withdrawn
        receiver.script(500, 500, 500)
        _, saved = stack.save(lesson(1, "webhooks"))
        content, version = saved["content_id"], saved["version"]
        arrived("version.completed")
        api("POST", f"/api/contents/{content}/versions/{version}/approve")
        arrived("version.deliverable")
        api("POST", f"/api/contents/{content}/versions/{version}/withdraw", json={"note": "a typo"})
        arrived("version.withdrawn")
        delivered = receiver.messages()
        assert [m.type for m in delivered] == ["version.completed", "version.deliverable", "version.withdrawn"]
        assert all(m.verified for m in receiver.messages(answered=None))
        assert len({m.webhook_id for m in delivered}) == 3
        first = [m for m in receiver.messages(answered=None) if m.webhook_id == delivered[0].webhook_id]
        assert [m.answered for m in first] == [500, 500, 500, 200]
        assert delivered[1].data["urls"]["delivery"].endswith(f"/api/contents/{content}/delivery")

        # when the webhook worker is killed while its request is in flight, the message comes again, same id
        receiver.script(HOLD)
        api("POST", f"/api/contents/{content}/versions/{version}/approve")
        wait_until(receiver.holding.is_set, timeout=60, message="the request held")
        os.kill(webhook_worker(stack), signal.SIGKILL)
        receiver.release()
        held = wait_until(lambda: [m for m in receiver.messages() if m.type == "version.deliverable"][1:], timeout=60,
                          message="the held message recorded")[0]
        wait_until(lambda: len([m for m in receiver.messages() if m.webhook_id == held.webhook_id]) >= 2, timeout=60,
                   message=f"the message sent again after the worker died\n{stack.tail()}")
        def attempts() -> list[str]:
            with connect(database_url, autocommit=True) as conn:
                return [r["outcome"] for r in conn.execute(
                    "SELECT outcome FROM webhook_attempts WHERE delivery_id = %s ORDER BY id",
                    (int(held.webhook_id.removeprefix("msg_")),)).fetchall()]
        # the sender writes its attempt once the receiver's answer is read: after the receiver has recorded it
        outcomes = wait_until(lambda: found if len(found := attempts()) >= 2 else None, timeout=30,
                              message="the second attempt written")
        assert outcomes == ["lost", "delivered"]

        # when the dispatcher is killed while its enqueue waits (Redis takes no writes), the message comes all the same
        control = redis.Redis.from_url(redis_url)
        control.execute_command("CLIENT", "PAUSE", "20000", "WRITE")
        try:
            api("POST", f"/api/contents/{content}/versions/{version}/withdraw", json={"note": "again"})
            with connect(database_url, autocommit=True) as conn:
                wait_until(lambda: conn.execute(
                    "SELECT 1 FROM webhook_deliveries WHERE status = 'pending' AND claim_token IS NOT NULL AND "
                    "sent_at IS NULL AND claim_until > now()").fetchone(), timeout=30, message="a claimed message")
            [(dispatcher, _)] = processes(stack, b"bin/dispatch")
            os.kill(dispatcher, signal.SIGKILL)
        finally:
            control.execute_command("CLIENT", "UNPAUSE")
        arrived("version.withdrawn", 2)

        # a receiver answering 410 has its endpoint disabled; the first receiver still gets its message
        gone.script(410)
        made = bin_webhooks(stack, "add", gone.url, "--team", "default", "--by", "ops", "--events",
                            "version.deliverable")
        assert made.returncode == 0, made.stderr
        gone.secret = made.stdout.strip().splitlines()[-1]
        api("POST", f"/api/contents/{content}/versions/{version}/approve")
        arrived("version.deliverable", 3)
        wait_until(lambda: "disabled: answered 410" in bin_webhooks(stack, "list").stdout, timeout=30,
                   message="the endpoint disabled")
        assert [m.answered for m in gone.messages(answered=None)] == [410] and gone.messages(None)[0].verified

        # nothing lost: every message of the first endpoint delivered
        assert {r["status"] for r in rows(stack, endpoint)} == {"delivered"} and len(rows(stack, endpoint)) == 6
        assert stack.stop() == []
    finally:
        stack.stop()
        receiver.stop()
        gone.stop()
