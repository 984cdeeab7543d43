"""Structured logs: one JSON line per event on stderr, so one task's life can be followed
across processes by its task id, lease token, RQ job id and outbox id.

Never pass input text or secrets here: only ids, statuses, classes and timings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def log(event: str, **fields: Any) -> None:
    record = {"ts": round(time.time(), 3), "pid": os.getpid(), "event": event}
    record.update({k: (str(v) if not isinstance(v, (int, float, str, bool, type(None), list, dict)) else v)
                   for k, v in fields.items()})
    sys.stderr.write(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    sys.stderr.flush()
