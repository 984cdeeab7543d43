"""Shared test tools: settings for a test's servers, a controllable executor, waiting on conditions."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import redis
from rq import Queue

from pipeline import attempt, runtime, settings
from pipeline.executor import Called
from pipeline.core.content import parse_draft
from pipeline.core.errors import PipelineError
from pipeline.core.principal import Principal
from pipeline.db import connect
from pipeline.core.lanes import all_queues
from pipeline.tasks import Asset, Task
from receipts.media import MediaStore


def make_settings(database_url: str, redis_url: str, media_dir: Path, **env: str) -> settings.Settings:
    base = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media_dir),
            "LEASE_SECONDS": "5", "HEARTBEAT_SECONDS": "1", "BACKOFF_BASE_SECONDS": "0.2",
            "BACKOFF_CAP_SECONDS": "1", "DISPATCH_CLAIM_SECONDS": "2", "LOST_DISPATCH_SECONDS": "2",
            "VIDEO_ENABLED": "false"}   # the lesson video's own tests turn it on
    return settings.load({**base, **env})


def wait_until(condition: Callable[[], object], timeout: float = 20.0, interval: float = 0.05,
               message: str = "condition") -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{message} did not hold within {timeout} s")
        time.sleep(interval)


@contextmanager
def unwritable(folder: Path) -> Iterator[Path]:
    """`folder` takes no new entries until the block ends, as a read-only mount or a full disk refuses them: made
    immutable (`chattr +i`) when we are root, whom permission bits do not stop, else stripped of write permission.
    A probe write proves it; where neither works (a file system without the flag) the test skips, or fails under
    CI=true."""
    import pytest

    folder.mkdir(parents=True, exist_ok=True)
    as_root = os.geteuid() == 0 and shutil.which("chattr") is not None
    if as_root:
        subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    else:
        folder.chmod(0o555)
    try:
        probe = folder / ".probe"
        try:
            probe.write_bytes(b"")
        except OSError:
            pass
        else:
            probe.unlink()
            message = f"cannot make {folder} refuse writes here (chattr +i, or chmod as a user other than root)"
            pytest.fail(message) if os.environ.get("CI") == "true" else pytest.skip(message)
        yield folder
    finally:
        if as_root:
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
        else:
            folder.chmod(0o755)


def lesson(n: int = 3, *, title: str = "校园生活", locale: str = "zh-CN", prefix: str = "") -> dict:
    return {"title": title, "locale": locale,
            "blocks": [{"key": f"b{i}", "text": f"{prefix}第{i}段：我们在学校学习。"} for i in range(1, n + 1)]}


# Who a test acts as when it calls the pipeline itself, without the web: people holding no API key, so no key's
# limits or spend apply (`keyed` gives one a key).
EDITOR = Principal.without_key("editor", role="editor")
SECOND_EDITOR = Principal.without_key("editor2", role="editor")
IMPORTER = Principal.without_key("importer", role="editor")   # a bulk import's saves
OPERATOR = Principal.without_key("operator", role="admin")    # what bin/keys acts as


def keyed(key_id: int, who: Principal = EDITOR) -> Principal:
    """`who` acting with the API key `key_id`: that key's own limits and daily spend apply."""
    return dataclasses.replace(who, key_id=key_id)


def draft(n: int = 3, **kw):
    return parse_draft(lesson(n, **kw))


@dataclass
class ControlledExecutor:
    """Does the work the test scripts: per task id a list of actions, consumed in order.

    An action is "ok", an exception instance to raise, or a threading.Event to wait on before succeeding.
    Unscripted tasks succeed. Successful work stores real bytes in the media store.
    """

    store: MediaStore
    script: dict[int, list] = field(default_factory=dict)
    calls: list[int] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def provider_name(self, kind: str) -> str:
        return kind

    def execute(self, task: Task, plan, call) -> Called:   # noqa: ARG002 - the script, not the plan, says what happens
        with self._lock:
            self.calls.append(task.id)
            actions = self.script.get(task.id, [])
            action = actions.pop(0) if actions else "ok"
        if isinstance(action, threading.Event):
            action.wait(30)
        elif isinstance(action, BaseException):
            raise action
        elif callable(action):
            action(task, call)
        data = f"{task.kind}:{task.fingerprint}".encode()
        sha = self.store.put(data)
        return Called(Asset(sha, "application/octet-stream", len(data)))


class _StoreUnread(runtime.Runtime):
    """A worker that could not read its receipt store's identity: its claims name no store."""

    receipt_store = None


def claim(cfg: settings.Settings, task_id: int, *, worker: str = "w", receipt_store: str | None = "",
          **changed) -> attempt.Attempt | None:
    """Claim the task as a worker named `worker` does (`pipeline.attempt.claim`), with these settings changed
    (lease_seconds=..., attempt_ceiling_seconds=...); the attempt (its `rt` is the worker's runtime) or None.
    `receipt_store`: the store the claim names ("": the worker's own, None: none, as when it cannot be read).
    One runtime (two connections) per database, worker and settings, however many claims a test makes."""
    key = (cfg.database_url, worker, receipt_store, tuple(sorted(changed.items())))
    rt = _claimers.get(key)
    if rt is None:
        make = _StoreUnread if receipt_store is None else runtime.Runtime
        rt = _claimers[key] = make(dataclasses.replace(cfg, **changed), ControlledExecutor(MediaStore(cfg.media_dir)),
                                   worker_id=worker, _receipt_store=receipt_store or None)
    return attempt.claim(rt, task_id)


_claimers: dict[tuple, runtime.Runtime] = {}


def work_burst(rt: runtime.Runtime, queues=None) -> None:
    """Drain the queues (both lanes, interactive first) with our worker class (RQ's SimpleWorker) in this
    process, using `rt`."""
    from bin.worker import Worker
    runtime.install(rt)
    conn = redis.Redis.from_url(rt.settings.redis_url)
    Worker([Queue(q, connection=conn) for q in queues or all_queues()], connection=conn).work(burst=True, logging_level="WARNING")


def task_rows(database_url: str, content_id: int | None = None) -> list[dict]:
    with connect(database_url) as conn:
        if content_id is None:
            return conn.execute("SELECT * FROM tasks ORDER BY id").fetchall()
        return conn.execute("SELECT * FROM tasks WHERE content_id = %s ORDER BY id", (content_id,)).fetchall()


def pending_count_mismatch(conn) -> dict:
    """Where the admission counters (pending_counts, kept by triggers) disagree with a count of the pending
    tasks, per API key whose save made them: {key_id: (kept, counted)}; empty when they agree."""
    counted = {r["key_id"]: r["n"] for r in conn.execute(
        "SELECT coalesce(v.saved_by_key, 0) AS key_id, count(*) AS n FROM tasks t "
        "JOIN versions v ON v.content_id = t.content_id AND v.version = t.version "
        "WHERE t.status IN ('ready', 'running', 'retry') GROUP BY 1").fetchall()}
    kept = {r["key_id"]: r["n"] for r in conn.execute(
        "SELECT key_id, sum(n) AS n FROM pending_counts GROUP BY key_id HAVING sum(n) <> 0").fetchall()}
    return {key: (kept.get(key, 0), counted.get(key, 0)) for key in kept.keys() | counted.keys()
            if kept.get(key, 0) != counted.get(key, 0)}


def assert_pending_counts(conn) -> None:
    assert pending_count_mismatch(conn) == {}


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


__all__ = ["PipelineError"]
