"""A rehearsal of a deployment over several machines, all on one bucket of object storage.

Two worker groups, each with its own MEDIA_DIR (as two machines would have), and one web
process with a third; one PostgreSQL, one Redis, one bucket. A lesson is produced, approved
and delivered through HTTP; an image worker of group A is killed after the provider answered
and its result receipt reached the bucket, before the database heard, and the reconciler of
group B, which never saw A's disk, recovers the task from that receipt: one provider call.
"""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest
import requests

from pipeline import keys, storage
from pipeline.core.records import idempotency_key
from testkit.fakeprovider import Behaviour
from testkit.helpers import lesson, wait_until
from testkit.system import System, drain, kill, system_env
from bin.embedded import free_port

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


@pytest.fixture
def machines(database_url, redis_url, tmp_path, fake, s3_env):
    logs = tmp_path / "logs"
    logs.mkdir()
    base = System({**system_env(database_url, redis_url, tmp_path / "web", fake.base_url), **s3_env}, logs)
    # machine A's call is held until the test has its lock in place, which takes seconds under load: the call must
    # still be waiting then, not ended by the stacks' 2-second read timeout
    group_a = base.with_env(MEDIA_DIR=str(tmp_path / "machine-a"), IMAGE_READ_TIMEOUT="40")
    group_b = base.with_env(MEDIA_DIR=str(tmp_path / "machine-b"))
    yield base, group_a, group_b
    base.stop()


def start_web(web: System) -> str:
    port = free_port()
    web.workers.append(web._spawn(["-m", "gunicorn", "--bind", f"127.0.0.1:{port}", "--workers", "2",
                                   "web:create_app()"], "web"))
    url = f"http://127.0.0.1:{port}"

    def healthy():
        try:
            return requests.get(url + "/healthz", timeout=1).status_code == 200
        except requests.RequestException:
            return False
    wait_until(healthy, timeout=30, message="the web app answering")
    return url


def test_two_worker_groups_and_a_web_process_share_one_bucket_and_recover_each_others_work(machines, fake,
                                                                                           tmp_path):
    web, group_a, group_b = machines
    url = start_web(web)
    with web.db() as conn:
        _, token = keys.create(conn, "editor@example.com", "admin")
        _, reviewer = keys.create(conn, "reviewer@example.com", "reviewer")   # a second person approves
    session = requests.Session()
    session.headers["X-API-Key"] = token
    fake.script(Behaviour("hold", seconds=30, endpoint="image"))
    saved = session.post(url + "/api/contents", json=lesson(1), timeout=10)
    assert saved.status_code == 202, saved.text
    content_id = saved.json()["content_id"]
    with web.db() as conn:
        image, tts, bundle = conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id",
                                          (content_id,)).fetchall()

    # given group A's image worker is in the provider call
    worker_a = group_a.start_worker("image")
    group_a.dispatch()
    wait_until(lambda: fake.in_flight("image") == 1, message="the provider call in flight on machine A")
    book_b = storage.receipt_book(group_b.cfg)
    # when the provider answers, the result receipt reaches the bucket, and A dies before the database hears
    with web.holding("SELECT * FROM tasks WHERE id = %s FOR UPDATE", image["id"]):
        fake.release()
        wait_until(lambda: book_b.result(image["id"], 1), message="A's result receipt, read on machine B")
        web.waiting_on_lock()
        kill(worker_a)
    assert web.task(image["id"])["status"] == "running"

    # then group B's reconciler recovers it from the receipt, and the lesson is produced on both groups
    group_a.start_worker("tts")
    group_b.start_worker("image"), group_b.start_worker("tts"), group_b.start_worker("bundle")
    rows = drain(group_b, content_id)
    assert [r["status"] for r in rows] == ["succeeded"] * 3
    with web.db() as conn:
        actions = [e["action"] for e in conn.execute("SELECT action FROM events WHERE task_id = %s ORDER BY id",
                                                     (image["id"],))]
    assert actions[-1] == "recovered_from_receipt"
    assert rows[0]["asset_sha256"] == book_b.result(image["id"], 1).sha256 and rows[0]["attempts"] == 1
    assert fake.calls_for(idempotency_key(image["fingerprint"], image["id"])).requests == 1

    # approved and delivered by the web process, which never shared a disk with either group
    assert session.post(url + f"/api/contents/{content_id}/versions/1/approve", timeout=10,
                        headers={"X-API-Key": reviewer}).status_code == 200
    delivery = session.get(url + f"/api/contents/{content_id}/delivery", timeout=10).json()
    anonymous = requests.Session()
    block = delivery["blocks"][0]
    for label in ("image", "audio"):
        got = anonymous.get(url + block[label]["url"], timeout=10)
        assert got.status_code == 200 and hashlib.sha256(got.content).hexdigest() == block[label]["sha256"]
    zipped = anonymous.get(url + delivery["bundle"]["url"], timeout=10)
    assert zipped.status_code == 200
    archive = zipfile.ZipFile(io.BytesIO(zipped.content))
    assert hashlib.sha256(archive.read(block["image"]["file"])).hexdigest() == block["image"]["sha256"]
    # nothing of the product landed on any machine's own disk
    for local in ("web", "machine-a", "machine-b"):
        assert not list((tmp_path / local).glob("assets/**/*")) and not list((tmp_path / local).glob("receipts/*"))
