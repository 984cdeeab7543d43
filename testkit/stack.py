"""The stack the README starts (`bin/dev`: `python -m bin.devstack`, which runs the Procfile's lines)
on servers of the caller's, driven over its HTTP API; for the acceptance tests and bench/makespan.py.

Providers are the fake OpenAI-compatible servers of testkit/fakeprovider, one per kind, each
answering after a fixed latency, so a run measures the pipeline's makespan against the ideal.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis
import requests

from pipeline import keys, settings as settings_mod
from pipeline.core import lanes
from pipeline.core import kinds
from pipeline.db import connect
from testkit.forkserver import die_with_parent
from testkit.fakeprovider import Behaviour, FakeProviderServer

ROOT = Path(__file__).resolve().parent.parent
TERMINAL = ("succeeded", "failed", "superseded", "cancelled", "unknown")



def fake_provider(latency: float) -> FakeProviderServer:
    """A fake provider whose every call is answered after `latency` seconds."""
    fake = FakeProviderServer().start()
    fake.set_default(Behaviour("delay", seconds=latency))
    return fake


def provider_env(image: FakeProviderServer, tts: FakeProviderServer, limit: int) -> dict[str, str]:
    """The HTTP adapters against the fakes, `limit` concurrent calls per provider, no per-minute limit.

    The models are the backends' defaults, which the fakes (strict about the OpenAI contract) accept.
    """
    env = {}
    for prefix, fake in (("IMAGE", image), ("TTS", tts)):
        env.update({f"{prefix}_PROVIDER": "openai", f"{prefix}_BASE_URL": fake.base_url,
                    f"{prefix}_API_KEY": "fake-key", f"{prefix}_DAILY_BUDGET": "unlimited",
                    f"{prefix}_MAX_CONCURRENCY": str(limit), f"{prefix}_RATE_PER_MINUTE": "1000000"})
    env["TTS_VOICE"] = "alloy"
    return env


def lesson(blocks: int, tag: str) -> dict:
    """A lesson whose texts are unique to `tag`, so nothing is reused from an earlier one."""
    return {"title": f"课程 {tag}", "locale": "zh-CN",
            "blocks": [{"key": f"b{i}", "text": f"{tag}：第{i}段，我们在学校学习中文。"}
                       for i in range(1, blocks + 1)]}


def ideal_seconds(blocks: int, limit: int, image_latency: float, tts_latency: float) -> float:
    """Every call slot busy from the save on: ceil(N / C) x latency for the slower kind."""
    return math.ceil(blocks / limit) * max(image_latency, tts_latency)


def descendants(pid: int) -> set[int]:
    """Every live process below `pid` (by parent links in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@dataclass
class DevStack:
    env: dict[str, str]
    port: int
    log: Path
    proc: subprocess.Popen | None = None
    api_key: str = ""
    started_pids: set[int] = field(default_factory=set)

    @classmethod
    def start(cls, *, database_url: str, redis_url: str, media_dir: Path, port: int, log: Path,
              **env: str) -> "DevStack":
        full = {**{k: v for k, v in os.environ.items() if not k.startswith(("IMAGE_", "TTS_"))},
                "DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media_dir),
                "PORT": str(port), "SECRET_KEY": "stack-test-secret-0123456789abcdefghij", "PYTHONPATH": str(ROOT),
                # its admin key and dev.env beside its log, never in the checkout's .data of a developer's own bin/dev
                "DEV_DATA_DIR": str(log.with_name(f"{log.stem}-dev-data")), **env}
        stack = cls(full, port, log)
        with connect(database_url, autocommit=True) as conn:
            stack.api_key = keys.create(conn, "editor@stack", "editor")[1]
        with open(log, "ab") as out:
            stack.proc = subprocess.Popen([sys.executable, "-m", "bin.devstack"], cwd=ROOT, env=full, stdout=out,
                                          stderr=subprocess.STDOUT, start_new_session=True,
                                          preexec_fn=die_with_parent)
        return stack

    @property
    def cfg(self) -> settings_mod.Settings:
        return settings_mod.load(self.env)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def worker_count(self) -> int:
        return (sum(lanes.workers(self.cfg, kind) + lanes.interactive_workers(self.cfg, kind) for kind in kinds.names())
                + self.cfg.webhooks.workers)

    def wait_ready(self, timeout: float = 90) -> None:
        """Until the web app answers and every worker of the pools has registered with RQ."""
        from rq import Worker
        client = redis.Redis.from_url(self.env["REDIS_URL"])
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"bin/dev exited with {self.proc.returncode}:\n{self.tail()}")
            try:
                ready = requests.get(f"{self.url}/readyz", timeout=2).status_code == 200
            except requests.RequestException:
                ready = False
            if ready and len(Worker.all(connection=client)) >= self.worker_count():
                self.started_pids = descendants(self.proc.pid)
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"the stack was not ready after {timeout} s:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def save(self, body: dict, **extra: str) -> tuple[float, dict]:
        """POST a content; (wall-clock time just before the request, the 202 body)."""
        started = time.time()
        response = requests.post(f"{self.url}/api/contents", json={**body, **extra}, timeout=30,
                                 headers={"X-API-Key": self.api_key})
        assert response.status_code == 202, response.text
        return started, response.json()

    def run_import(self, path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(ROOT / "bin" / "import"), str(path), "--url", self.url,
                               "--api-key", self.api_key], capture_output=True, text=True, timeout=600)

    def wait_done(self, content_id: int, version: int = 1, timeout: float = 120) -> dict:
        """Until every task of the version is finished; its tasks' statuses and the time the last one ended."""
        deadline = time.monotonic() + timeout
        with connect(self.env["DATABASE_URL"], autocommit=True) as conn:
            while True:
                rows = conn.execute("SELECT kind, status, updated_at FROM tasks WHERE content_id = %s AND "
                                    "version = %s", (content_id, version)).fetchall()
                if rows and all(r["status"] in TERMINAL for r in rows):
                    return {"statuses": sorted({r["status"] for r in rows}),
                            "ended": max(r["updated_at"] for r in rows).timestamp(),
                            "media_ended": max(r["updated_at"] for r in rows if r["kind"] != "bundle").timestamp()}
                if time.monotonic() > deadline:
                    raise AssertionError(f"content {content_id} not done after {timeout} s: "
                                         f"{json.dumps([r['status'] for r in rows])}\n{self.tail()}")
                time.sleep(0.05)

    def stop(self, timeout: float = 60) -> list[int]:
        """Ctrl-C as a terminal sends it (SIGINT to bin/dev's process group); the processes left after it."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        pids = self.started_pids | descendants(self.proc.pid)
        os.killpg(self.proc.pid, signal.SIGINT)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
            raise AssertionError(f"bin/dev did not stop within {timeout} s:\n{self.tail()}")
        deadline = time.monotonic() + 5
        while any(alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        return sorted(p for p in pids if alive(p))
