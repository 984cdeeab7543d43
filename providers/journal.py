"""Durable memory of the local providers: a journal of results and armed faults.

This module owns two small on-disk stores that let the offline providers act
like a real paid provider:

* `Journal`: one file per idempotency key holding the result of the first
  execution, so `lookup(key)` can answer Found/NoRecord and a repeated
  `generate` with a known key replays the result instead of working again;
  a key marked untraced answers Unsupported, as a provider without a lookup.
* `FaultPlan`: faults armed by one process (the web app in demo mode) and
  consumed, each exactly once, by the next `generate` in any process (an rq
  worker) whose request it is meant for: a fault armed with a `scope` strikes
  only a request whose text contains that scope (a demo lesson's run mark), so
  it cannot strike another lesson. A fault is a file (its content: the fault
  and its scope); consuming it is an `os.rename` claim, which only one process
  can win.

Layout under the directory given to the constructor::

    entries/<key>.result      header JSON line, then the media bytes
    entries/<key>.untraced    the lookup of this key cannot tell (empty)
    faults/<ns>-<fault>       one armed fault, oldest first
    faults/claimed/           faults being consumed (renamed here to claim)

Every write is atomic and durable (temp file, fsync, os.replace, fsync of the
directory). No path is ever taken from input: keys are validated against a
strict character set before they name a file. This module must not know about
tasks, receipts or databases.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from .base import Found, GenerateRequest, LookupAnswer, NoRecord, Result, Unsupported
from .errors import Ambiguous, Busy, Permanent, ProviderConfigError, Transient

_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,127}")

FAIL_BEFORE_SEND = "fail_before_send"
ACCEPT_THEN_LOSE = "accept_then_lose"
ACCEPT_THEN_LOSE_UNTRACED = "accept_then_lose_untraced"   # and the lookup cannot tell: only a person decides
CRASH_MID_CALL = "crash_mid_call"
PERMANENT_ERROR = "permanent_error"
RATE_LIMITED = "rate_limited"
FAULTS = (FAIL_BEFORE_SEND, ACCEPT_THEN_LOSE, ACCEPT_THEN_LOSE_UNTRACED, CRASH_MID_CALL, PERMANENT_ERROR,
          RATE_LIMITED)
# Faults that strike before any work is done; the others strike after the
# result has been journaled, so a later lookup finds it.
FAULTS_BEFORE_WORK = (FAIL_BEFORE_SEND, PERMANENT_ERROR, RATE_LIMITED)
CRASH_EXIT_CODE = 137
MAX_SCOPE = 200


def validate_key(key: str) -> str:
    """Return `key` if it is safe to use as a file name, else raise Permanent."""
    if not isinstance(key, str) or not _KEY_RE.fullmatch(key):
        raise Permanent(
            f"idempotency key {key!r} is invalid: use 1-128 characters from "
            "A-Z, a-z, 0-9, '-' and '_' (a hex digest or a UUID fits), starting "
            "with a letter or digit"
        )
    return key


def request_fingerprint(kind: str, text: str, params: Mapping[str, Any]) -> str:
    """sha256 of a canonical JSON of the request, to detect a key reused for other input."""
    canonical = json.dumps(
        {"kind": kind, "text": text, "params": dict(params)},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Write `data` to `path` so a reader sees either nothing or all of it, durably."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    # The rename is only durable once the directory entry itself is on disk.
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def encode_entry(result: Result, fingerprint: str) -> bytes:
    """Serialise a journal entry: one JSON header line, then the raw bytes."""
    header = {
        "fingerprint": fingerprint,
        "media_type": result.media_type,
        "provider_request_id": result.provider_request_id,
        "metadata": result.metadata,
        "size": len(result.data),
        "sha256": hashlib.sha256(result.data).hexdigest(),
    }
    # ensure_ascii keeps the header free of raw newlines, so the first b"\n" ends it.
    return json.dumps(header, sort_keys=True, ensure_ascii=True).encode("ascii") + b"\n" + result.data


def decode_entry(blob: bytes) -> tuple[Result, str]:
    """Parse a journal entry back into (result, fingerprint); ValueError if damaged."""
    head, sep, data = blob.partition(b"\n")
    if not sep:
        raise ValueError("journal entry has no header line")
    header = json.loads(head)
    if len(data) != header["size"] or hashlib.sha256(data).hexdigest() != header["sha256"]:
        raise ValueError("journal entry bytes do not match their recorded size and sha256")
    result = Result(data, header["media_type"], header["provider_request_id"], header["metadata"])
    return result, header["fingerprint"]


class Journal:
    """Results keyed by idempotency key, written once per key, atomically."""

    def __init__(self, directory: Path) -> None:
        self._dir = Path(directory) / "entries"
        self._dir.mkdir(parents=True, exist_ok=True)

    def path_for(self, key: str) -> Path:
        return self._dir / f"{validate_key(key)}.result"

    def get(self, key: str) -> tuple[Result, str] | None:
        """Return (result, request fingerprint) for `key`, or None if never journaled."""
        path = self.path_for(key)
        try:
            blob = path.read_bytes()
        except FileNotFoundError:
            return None
        try:
            return decode_entry(blob)
        except (ValueError, KeyError) as exc:
            # Atomic writes make this unreachable short of disk damage; say so plainly.
            raise Ambiguous(f"journal entry {path.name} is damaged: {exc}") from exc

    def put(self, key: str, result: Result, fingerprint: str) -> None:
        write_atomically(self.path_for(key), encode_entry(result, fingerprint))

    def untrace(self, key: str) -> None:
        """From now on a lookup of `key` answers that it cannot tell (a provider without a lookup for it)."""
        write_atomically(self._dir / f"{validate_key(key)}.untraced", b"")

    def traced(self, key: str) -> bool:
        return not (self._dir / f"{validate_key(key)}.untraced").exists()


def replay_or_none(journal: Journal, key: str, fingerprint: str) -> Result | None:
    """The journaled result for a repeated key, or None; Permanent if the input differs."""
    entry = journal.get(key)
    if entry is None:
        return None
    result, recorded = entry
    if recorded != fingerprint:
        raise Permanent(
            f"idempotency key {key!r} was already used for a different request; "
            "use a new key for new input"
        )
    return result


class FaultPlan:
    """Faults armed for a provider, each consumed exactly once by the next call."""

    def __init__(self, directory: Path) -> None:
        self._dir = Path(directory) / "faults"
        self._claimed = self._dir / "claimed"
        self._claimed.mkdir(parents=True, exist_ok=True)

    def arm(self, fault: str, scope: str | None = None) -> None:
        """Arm `fault` for the next generate call (in any process sharing the directory) whose request text
        contains `scope`; for the very next call when `scope` is None."""
        if fault not in FAULTS:
            raise ProviderConfigError(f"unknown fault {fault!r}: choose one of {', '.join(FAULTS)}")
        if scope is not None and not (isinstance(scope, str) and 1 <= len(scope.strip()) <= MAX_SCOPE):
            raise ProviderConfigError(f"a fault's scope must be 1 to {MAX_SCOPE} characters of the request text")
        # A nanosecond prefix keeps arming order; the uuid keeps two arms apart.
        name = f"{time.time_ns():020d}-{uuid.uuid4().hex[:8]}-{fault}"
        write_atomically(self._dir / name, json.dumps({"fault": fault, "scope": scope}).encode())

    def armed(self) -> list[str]:
        """Faults waiting to fire, oldest first."""
        return [_fault_of(name) for name in self._pending_names()]

    def disarm_all(self, scope: str | None = None) -> int:
        """Drop every armed fault (of this scope only, when one is given); returns how many were dropped."""
        return sum(1 for name in self._pending_names()
                   if (scope is None or self._scope(name) == scope) and self._claim(name))

    def take(self, text: str = "") -> str | None:
        """Claim and consume the oldest armed fault meant for a request of this text, or None."""
        for name in self._pending_names():
            scope = self._scope(name)
            if (scope is None or scope in text) and self._claim(name):
                return _fault_of(name)
        return None

    def _scope(self, name: str) -> str | None:
        """The scope a fault was armed with; None for an unscoped one (or one armed before scopes existed)."""
        try:
            content = json.loads((self._dir / name).read_bytes())
        except (OSError, ValueError):
            return None
        return content.get("scope") if isinstance(content, dict) else None

    def _pending_names(self) -> list[str]:
        names = (p.name for p in self._dir.iterdir() if p.is_file() and not p.name.startswith("."))
        return sorted(n for n in names if _fault_of(n) in FAULTS)

    def _claim(self, name: str) -> bool:
        target = self._claimed / f"{name}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        try:
            # rename is atomic: of two processes racing for one fault, one gets
            # FileNotFoundError and moves on.
            os.rename(self._dir / name, target)
        except FileNotFoundError:
            return False
        target.unlink(missing_ok=True)
        _fsync_dir(self._dir)
        return True


def _fault_of(name: str) -> str:
    return name.rsplit("-", 1)[-1]


def fault_error(fault: str, provider: str) -> Exception | None:
    """The error an armed fault raises, or None for the crash fault (it exits instead)."""
    what = f"{provider}: armed fault {fault!r}"
    if fault == FAIL_BEFORE_SEND:
        return Transient(f"{what}: the request was not sent")
    if fault == PERMANENT_ERROR:
        return Permanent(f"{what}: the provider refused the request", http_status=400)
    if fault == RATE_LIMITED:
        return Busy(f"{what}: rate limited", retry_after=2, http_status=429)
    if fault in (ACCEPT_THEN_LOSE, ACCEPT_THEN_LOSE_UNTRACED):
        return Ambiguous(f"{what}: the provider did the work but the answer was lost")
    return None


def crash_now() -> None:
    """Die like a killed worker: no cleanup, no exception handlers, exit code 137."""
    os._exit(CRASH_EXIT_CODE)


class LocalState:
    """Journal and fault plan of one local provider, and the call flow around its work."""

    def __init__(self, directory: Path, provider: str, kind: str) -> None:
        self.provider = provider
        self.kind = kind
        self.journal = Journal(directory)
        self.faults = FaultPlan(directory)

    def run(self, request: GenerateRequest, work: Callable[[GenerateRequest], Result]) -> Result:
        """Serve `request`: armed fault first, then the journal, then `work` once per key."""
        if request.kind != self.kind:
            raise Permanent(f"{self.provider} makes {self.kind!r}, not {request.kind!r}")
        key = validate_key(request.idempotency_key)
        fault = self.faults.take(request.text)
        if fault in FAULTS_BEFORE_WORK:
            raise fault_error(fault, self.provider)
        fingerprint = request_fingerprint(request.kind, request.text, request.params)
        result = replay_or_none(self.journal, key, fingerprint)
        if result is None:
            result = work(request)
            self.journal.put(key, result, fingerprint)
        if fault == CRASH_MID_CALL:
            crash_now()
        if fault == ACCEPT_THEN_LOSE_UNTRACED:
            self.journal.untrace(key)
        if fault in (ACCEPT_THEN_LOSE, ACCEPT_THEN_LOSE_UNTRACED):
            raise fault_error(fault, self.provider)
        return result

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        if not self.journal.traced(idempotency_key):
            return Unsupported()
        entry = self.journal.get(idempotency_key)
        return NoRecord() if entry is None else Found(entry[0])


class LocalProvider:
    """What both local providers share: the journal (lookup), armed faults and the call flow.

    A subclass sets `name` and `kind`, calls `_open_state(journal_dir)` and implements `_make`.
    """

    name = "local"
    kind = ""
    honours_idempotency_key = True
    supports_lookup = True

    def _open_state(self, journal_dir: Path) -> None:
        self._state = LocalState(Path(journal_dir) / self.name, self.name, self.kind)

    def arm(self, fault: str, scope: str | None = None) -> None:
        """Make the next generate call (in any process) whose text contains `scope` (any call, without one)
        fail as `fault` says, once."""
        self._state.faults.arm(fault, scope)

    def armed_faults(self) -> list[str]:
        return self._state.faults.armed()

    def disarm_all(self, scope: str | None = None) -> int:
        return self._state.faults.disarm_all(scope)

    def generate(self, request: GenerateRequest) -> Result:
        return self._state.run(request, self._make)

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        return self._state.lookup(idempotency_key)

    def _make(self, request: GenerateRequest) -> Result:
        raise NotImplementedError
