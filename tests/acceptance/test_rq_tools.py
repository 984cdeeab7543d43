"""RQ's own tools read our JSON queues on a running stack, as an operator starts them from a bare shell with only
REDIS_URL (docs/runbook.md, "RQ's own tools"): `bin/rq info` and `bin/rq-dashboard`, whose JSON lists the
Procfile's `rq worker-pool` workers, the job a busy one runs, and our queues."""

from __future__ import annotations

import re
import signal
import subprocess

import requests

from bin.embedded import free_port
from pipeline.core import lanes
from pipeline.core import kinds
from pipeline.db import connect
from testkit.forkserver import die_with_parent
from testkit.helpers import wait_until
from testkit.stack import ROOT, DevStack, descendants, fake_provider, lesson, provider_env

IMAGE_SECONDS = 10.0   # the window in which one image worker is busy: the dashboard is read inside it



def bare(command: str, *argv: str, redis_url: str) -> list[str]:
    """A bin/ command as an operator types it: no virtualenv on PATH, no PYTHONPATH, only REDIS_URL."""
    return ["env", "-i", "PATH=/usr/bin:/bin", f"REDIS_URL={redis_url}", str(ROOT / "bin" / command), *argv]


def pool_queues(stack: DevStack) -> list[str]:
    """The queues of every worker the Procfile's pools run, one entry per worker, as RQ lists them."""
    found = []
    for kind in kinds.names():
        found += [",".join(lanes.worker_queues(kind))] * lanes.workers(stack.cfg, kind)
        found += [kind] * lanes.interactive_workers(stack.cfg, kind)
    return sorted(found + ["webhook"] * stack.cfg.webhooks.workers)


def test_rq_info_and_rq_dashboard_find_our_queues_our_workers_and_the_job_a_worker_runs(database_url, redis_url,
                                                                                        tmp_path):
    image, speech = fake_provider(IMAGE_SECONDS), fake_provider(0.2)
    stack = DevStack.start(database_url=database_url, redis_url=redis_url, media_dir=tmp_path / "media",
                           port=free_port(), log=tmp_path / "dev.log", **provider_env(image, speech, 2))
    port = free_port()
    dashboard = None
    log = open(tmp_path / "dashboard.log", "wb")
    try:
        stack.wait_ready()
        pool_pids = descendants(stack.proc.pid)
        dashboard = subprocess.Popen(bare("rq-dashboard", "--port", str(port), redis_url=redis_url),
                                     cwd=tmp_path, stdout=log,
                                     stderr=subprocess.STDOUT, preexec_fn=die_with_parent)
        base = f"http://127.0.0.1:{port}/0/data"

        def answered(path: str):
            try:
                response = requests.get(base + path, timeout=5)
            except requests.ConnectionError:
                assert dashboard.poll() is None, (tmp_path / "dashboard.log").read_text()
                return None
            assert response.status_code == 200, f"{path}: {response.status_code} {response.text[:2000]}"
            return response.json()

        # the dashboard answers before the lesson starts, so its first reading falls inside the call
        wait_until(lambda: answered("/workers.json"), timeout=60, message="rq-dashboard answering")
        # given an editor's lesson whose image call is in flight, so one image worker is busy with its message
        _, body = stack.save(lesson(1, "rq-tools"))
        wait_until(lambda: image.in_flight("image") == 1, timeout=60, message="the image call in flight")
        with connect(database_url, autocommit=True) as conn:
            task = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image'",
                                (body["content_id"],)).fetchone()["id"]

        # the dashboard lists every worker of the pools, by the pids bin/dev started, with their queues
        def busy_image_worker():
            listed = answered("/workers.json")
            busy = [w for w in listed["workers"] if w["state"] == "busy" and w["queues"][0] == "image"] if listed else []
            return listed if busy else None

        # (a worker's state is read from Redis as the worker last wrote it: waited for, not read once)
        workers = wait_until(busy_image_worker, timeout=60, message="rq-dashboard showing the busy image worker")[
            "workers"]
        assert sorted(",".join(w["queues"]) for w in workers) == pool_queues(stack)
        assert {w["pid"] for w in workers} <= pool_pids and len({w["pid"] for w in workers}) == len(workers)
        # and the busy one's job, read as the JSON message the dispatcher sent (a pickle reader fails here)
        busy = [w for w in workers if w["state"] == "busy" and w["queues"][0] == "image"]
        assert [w["current_job"]["description"] for w in busy] == [f"task {task}"], workers
        job = answered(f"/job/{busy[0]['current_job']['job_id']}.json")
        assert (job["origin"], job["status"], job["description"]) == ("image", "started", f"task {task}")

        # RQ's own `rq info` sees the same workers on the kinds' interactive queues, to which every task pool listens
        # (the webhook pool listens to its own queue only)
        info = subprocess.run(bare("rq", "info", "--raw", "--only-workers", *kinds.names(), redis_url=redis_url),
                              cwd=tmp_path, capture_output=True, text=True, timeout=60)
        assert info.returncode == 0, info.stdout + info.stderr
        listed = [int(m[1]) for m in re.finditer(r"^worker \S+ \(\S+ \S+ (\d+)\)", info.stdout, re.MULTILINE)]
        assert sorted(listed) == sorted(w["pid"] for w in workers if w["queues"] != ["webhook"]), info.stdout

        # once the lesson is done, each kind's interactive queue shows the message it finished and none waiting
        # (RQ moves a message into its finished registry after our job function returned, so after the task's
        # success is visible: waited for, not read once)
        stack.wait_done(body["content_id"])

        def all_finished():
            queues = {q["name"]: q for q in answered("/queues.json")["queues"]}
            return queues if all(queues[kind]["finished_job_registry_count"] >= 1 for kind in kinds.names()) else None

        queues = wait_until(all_finished, timeout=30, message="every kind's message in its finished registry")
        for kind in kinds.names():
            assert (queues[kind]["count"], queues[kind]["failed_job_registry_count"]) == (0, 0), queues[kind]
        listed_jobs = answered("/jobs/image/finished/8/asc/1.json")["jobs"]
        assert [j["description"] for j in listed_jobs] == [f"task {task}"]
    finally:
        if dashboard is not None:
            dashboard.terminate()
            dashboard.wait(10)
        log.close()
        stack.stop()
        image.stop()
        speech.stop()
