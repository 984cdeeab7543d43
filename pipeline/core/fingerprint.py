"""Canonical JSON and input fingerprints. Pure.

Same input, same fingerprint: keys sorted, UTF-8 kept as text, no insignificant
whitespace, so `{"kind":"audio","text":"你好"}` and `{"text":"你好","kind":"audio"}`
digest alike.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def digest(value: Any) -> str:
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()
