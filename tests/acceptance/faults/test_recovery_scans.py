"""The dispatcher's recovery scans: with no reconcile run at all, a lost message is sent again and a dead
worker's expired lease is decided, each within its bound (RECOVERY_SCAN_SECONDS, docs/reliability.md)."""

import redis
from rq import Queue

from pipeline.core.lanes import all_queues
from testkit.helpers import wait_until
from testkit.system import ROOT, kill, spawn
from testkit.crashes import key_of, save_one_block, worker_in_the_middle_of_an_image_call


def dispatcher(system):
    return spawn(system, [str(ROOT / "bin" / "dispatch")], "dispatcher")


def dispatches(system, task_id: int) -> int:
    with system.db() as conn:
        return conn.execute("SELECT count(*) AS n FROM outbox WHERE task_id = %s AND sent_at IS NOT NULL",
                            (task_id,)).fetchone()["n"]


def runs_recorded(system) -> int:
    with system.db() as conn:
        return conn.execute("SELECT count(*) AS n FROM reconcile_runs").fetchone()["n"]


def test_a_message_lost_from_redis_is_sent_again_by_the_dispatcher_alone(system):
    system = system.with_env(RECOVERY_SCAN_SECONDS="0.5", LOST_DISPATCH_SECONDS="2")
    saved, (image, tts, bundle) = save_one_block(system)
    dispatcher(system)
    wait_until(lambda: dispatches(system, image["id"]) >= 1, message="the image's message sent")
    # when: the queues are emptied before any worker took the messages (Redis restarted empty, say)
    client = redis.Redis.from_url(system.env["REDIS_URL"])
    for name in all_queues():
        Queue(name, connection=client).empty()
    assert Queue("image", connection=client).count == 0
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    # then: the dispatcher's scan sends them again and the lesson completes, without a reconcile run
    wait_until(lambda: all(system.task(t["id"])["status"] == "succeeded" for t in (image, tts, bundle)),
               timeout=30, message="the lesson completing after its messages were lost")
    assert dispatches(system, image["id"]) >= 2
    assert runs_recorded(system) == 0


def test_a_dead_workers_expired_lease_is_decided_by_the_dispatcher_alone(system, fake):
    system = system.with_env(RECOVERY_SCAN_SECONDS="0.5")
    saved, (image, tts, bundle) = save_one_block(system)
    worker = worker_in_the_middle_of_an_image_call(system, fake)
    dispatcher(system)
    kill(worker)
    fake.release()
    # the fake has no lookup: the call may have run, so the scan marks it unknown instead of paying again
    row = wait_until(lambda: (r := system.task(image["id"]))["status"] != "running" and r, timeout=20,
                     message="the expired lease decided")
    assert row["status"] == "unknown" and "outcome is unknown" in row["last_error"]
    assert runs_recorded(system) == 0
    assert fake.calls_for(key_of(image)).requests == 1
