"""Receipts of provider calls, one pair per attempt, under MEDIA_DIR/receipts/<task id>/.

The intent receipt is durable on disk before the call starts; the result receipt
is durable (after the asset file) before the database hears of the result. With
them the reconciler can tell, after any crash, whether a call was never made,
made with an unknown outcome, or made and its result kept.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from receipts.durable import write_atomic


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
class Outcome:
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
    def __init__(self, root: Path) -> None:
        self.root = Path(root) / "receipts"

    def _path(self, task_id: int, attempt: int, what: str) -> Path:
        if not (isinstance(task_id, int) and isinstance(attempt, int) and task_id > 0 and attempt > 0):
            raise ValueError(f"receipts are kept per positive task id and attempt, not {task_id!r}/{attempt!r}")
        return self.root / str(task_id) / f"{attempt:04d}-{what}.json"

    def write_intent(self, intent: Intent) -> None:
        write_atomic(self._path(intent.task_id, intent.attempt, "intent"), json.dumps(asdict(intent)).encode())

    def write_result(self, outcome: Outcome) -> None:
        write_atomic(self._path(outcome.task_id, outcome.attempt, "result"), json.dumps(asdict(outcome)).encode())

    def intent(self, task_id: int, attempt: int) -> Intent | None:
        return self._read(self._path(task_id, attempt, "intent"), Intent)

    def result(self, task_id: int, attempt: int) -> Outcome | None:
        return self._read(self._path(task_id, attempt, "result"), Outcome)

    @staticmethod
    def _read(path: Path, kind):
        try:
            return kind(**json.loads(path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError):
            return None  # a torn write cannot happen (atomic rename); anything else is not ours

    def of_task(self, task_id: int) -> list[dict]:
        """Every receipt of a task, oldest attempt first, for the UI."""
        folder = self.root / str(int(task_id))
        found = []
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            try:
                found.append({"file": path.name, **json.loads(path.read_text())})
            except ValueError:
                continue
        return found

    def compact(self, task_id: int) -> int:
        """Drop a finished task's receipts (retention); returns how many files went."""
        folder = self.root / str(int(task_id))
        count = 0
        for path in folder.glob("*.json") if folder.is_dir() else []:
            path.unlink(missing_ok=True)
            count += 1
        if folder.is_dir():
            folder.rmdir()
        return count


def now() -> float:
    return round(time.time(), 3)
