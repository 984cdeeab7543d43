"""Receipts of provider calls, one pair per attempt, under `receipts/<task id>/` of the store.

The store is a local directory (MEDIA_DIR) or an S3 bucket shared by every machine
(receipts/objects.py). The intent receipt is durable (fsynced, or its PUT acknowledged)
before the call starts; the result receipt
is durable (after the asset file) before the database hears of the result. With
them the reconciler can tell, after any crash, whether a call was never made,
made with an unknown outcome, or made and its result kept.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from receipts.objects import Objects, objects_of


@dataclass(frozen=True)
class Intent:
    task_id: int
    attempt: int
    lease_token: str
    provider: str
    model: str
    fingerprint: str
    idempotency_key: str
    at: float


@dataclass(frozen=True)
class ResultReceipt:
    task_id: int
    attempt: int
    lease_token: str
    provider_request_id: str
    sha256: str
    size: int
    media_type: str
    width: int | None
    height: int | None
    duration_ms: int | None
    call_ms: int
    at: float


class ReceiptBook:
    def __init__(self, where: Objects | Path | str) -> None:
        self.objects = objects_of(where)

    @staticmethod
    def _key(task_id: int, attempt: int, what: str) -> str:
        if not (isinstance(task_id, int) and isinstance(attempt, int) and task_id > 0 and attempt > 0):
            raise ValueError(f"receipts are kept per positive task id and attempt, not {task_id!r}/{attempt!r}")
        return f"receipts/{task_id}/{attempt:04d}-{what}.json"

    STORE_KEY = "receipts/STORE"

    def store_id(self) -> str:
        """This store's identity, made on first use and kept inside the store itself.

        A worker records it with its claim; the reconciler compares it with its own to know
        whether a missing receipt is absent or merely out of its sight (another machine's disk).
        Two processes racing to make it may each see their own for a moment: then they differ,
        which only makes the reconciler more careful.
        """
        found = self.objects.get(self.STORE_KEY)
        if found:
            return found.decode()
        self.objects.put(self.STORE_KEY, uuid.uuid4().hex.encode())
        return (self.objects.get(self.STORE_KEY) or b"").decode()

    def write_intent(self, intent: Intent) -> None:
        self.objects.put(self._key(intent.task_id, intent.attempt, "intent"), json.dumps(asdict(intent)).encode())

    def write_result(self, outcome: ResultReceipt) -> None:
        self.objects.put(self._key(outcome.task_id, outcome.attempt, "result"), json.dumps(asdict(outcome)).encode())

    def intent(self, task_id: int, attempt: int) -> Intent | None:
        return self._read(self._key(task_id, attempt, "intent"), Intent)

    def result(self, task_id: int, attempt: int) -> ResultReceipt | None:
        return self._read(self._key(task_id, attempt, "result"), ResultReceipt)

    def _read(self, key: str, kind):
        data = self.objects.get(key)
        if data is None:
            return None
        try:
            return kind(**json.loads(data))
        except (ValueError, TypeError):
            return None  # a torn write cannot happen (atomic rename, whole PUT); anything else is not ours

    def _keys(self, task_id: int) -> list[str]:
        return [k for k in self.objects.keys(f"receipts/{int(task_id)}/") if k.endswith(".json")]

    def of_task(self, task_id: int) -> list[dict]:
        """Every receipt of a task, oldest attempt first, for the UI."""
        found = []
        for key in self._keys(task_id):
            try:
                found.append({"file": key.rsplit("/", 1)[1], **json.loads(self.objects.get(key) or b"")})
            except ValueError:
                continue
        return found

    def compact(self, task_id: int) -> int:
        """Drop a finished task's receipts (retention); returns how many went."""
        count = 0
        for key in self._keys(task_id):
            count += self.objects.delete(key)
        folder = getattr(self.objects, "path", None)
        if folder is not None:   # a local store also drops the emptied folder
            try:
                folder(f"receipts/{int(task_id)}").rmdir()
            except OSError:
                pass
        return count


def now() -> float:
    return round(time.time(), 3)
