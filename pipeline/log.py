"""Structured logs: one JSON line per event on stderr, so one task's life can be followed
across processes by its task id, lease token, RQ job id and outbox id, and one HTTP request's
lines by its request id.

`bind(**fields)` adds fields to every line logged in the current context until it is undone
(`unbind`): the web binds each request's id for the request's life.

Never pass input text or secrets here: only ids, statuses, classes and timings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextvars import ContextVar, Token
from typing import Any

_bound: ContextVar[dict[str, Any]] = ContextVar("log_fields", default={})


def bind(**fields: Any) -> Token:
    """Add these fields to every line logged in this context; give the token to `unbind` to end it."""
    return _bound.set({**_bound.get(), **fields})


def unbind(token: Token) -> None:
    _bound.reset(token)


def log(event: str, **fields: Any) -> None:
    record = {"ts": round(time.time(), 3), "pid": os.getpid(), "event": event, **_bound.get()}
    record.update({k: (str(v) if not isinstance(v, (int, float, str, bool, type(None), list, dict)) else v)
                   for k, v in fields.items()})
    sys.stderr.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    sys.stderr.flush()
