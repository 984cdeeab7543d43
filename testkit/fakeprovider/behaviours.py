"""What the fake does with one request: the scripted behaviours, and what it counts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

ENDPOINTS = {"/v1/images/generations": "image", "/v1/audio/speech": "audio"}
# The Files and Batch API's steps (testkit/fakeprovider/batch.py): a behaviour names one to act on it alone;
# a behaviour for no endpoint is never taken by them. The step is done first, then the behaviour acts on
# its answer (hold, drop), so a held answer is one whose work the fake has already done.
BATCH_STEPS = ("files.create", "files.list", "files.content", "batches.create", "batches.list", "batches.get",
               "batches.cancel")
ACTIONS = ("ok", "delay", "hold", "status", "hang", "drop", "reset", "truncate", "bad_body", "bad_base64",
           "trickle", "huge", "compressed")


@dataclass(frozen=True)
class Behaviour:
    """What the fake does with one request."""

    action: str = "ok"
    seconds: float = 0.0
    status: int = 200
    retry_after: str | None = None
    message: str | None = None
    execute: bool | None = None
    endpoint: str | None = None
    size: int = 0                       # huge: bytes to send
    declare: bool = True                # huge: send a Content-Length

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}: choose one of {', '.join(ACTIONS)}")
        if self.endpoint not in (None, *ENDPOINTS.values(), *BATCH_STEPS):
            raise ValueError(f"unknown endpoint {self.endpoint!r}: use 'image', 'audio', a batch step "
                             f"({', '.join(BATCH_STEPS)}) or None")

    @property
    def executes(self) -> bool:
        # An answer needs an execution (or a replay); only failures may skip it.
        if self.action in ("status", "hang", "drop", "reset") and self.execute is not None:
            return self.execute
        return self.action != "status"

    @classmethod
    def from_json(cls, data: dict) -> Behaviour:
        return cls(**data)

    @staticmethod
    def fail(status: int, *, retry_after: str | float | None = None, message: str | None = None,
             endpoint: str | None = None, execute: bool | None = None) -> Behaviour:
        after = None if retry_after is None else str(retry_after)
        return Behaviour("status", status=status, retry_after=after, message=message,
                         endpoint=endpoint, execute=execute)


@dataclass(frozen=True)
class Calls:
    """How often one idempotency key reached the fake, and how often it was executed."""

    requests: int = 0
    executions: int = 0


@dataclass(frozen=True)
class RecordedRequest:
    endpoint: str
    key: str
    headers: dict
    body: Any
