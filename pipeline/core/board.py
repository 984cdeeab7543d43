"""The board's decisions: one word for a version's state, progress counts, the search pattern. Pure."""

from __future__ import annotations

from collections import Counter
from typing import Iterable

from pipeline.core import kinds
from pipeline.core.states import TERMINAL, TaskStatus

WAITING = frozenset({TaskStatus.READY.value, TaskStatus.RETRY.value})
STATUS_ORDER = [s.value for s in TaskStatus]
TERMINAL_NAMES = frozenset(s.value for s in TERMINAL)   # a task in one of these changes only by a person's action


def progress(counts: dict[str, int]) -> dict:
    """Counts per status with the share that is finished, for progress bars."""
    total = sum(counts.values())
    done = counts.get("succeeded", 0)
    return {"total": total, "succeeded": done, "percent": round(100 * done / total) if total else 0,
            "counts": {s: counts[s] for s in STATUS_ORDER if counts.get(s)}}


# A reviewer's decisions about a version, on its history (pipeline.review); the latest is where it stands.
REVIEW_DECISIONS = ("approved", "rejected", "changes_requested", "approval_withdrawn")
# A version in one of these is terminal: nothing moves on without a person's action (a retry, a new version).
FINISHED = ("complete", "failed", "cancelled", "superseded")


def version_status(tasks: Iterable[tuple[str, str]], cancel_requested: bool = False) -> str:
    """One word for a version's state, from its tasks' (kind, status).

    in_progress (cancelling, once a cancel was asked) while work can still go on; then complete
    when every task succeeded; else needs_decision (an unknown outcome waits for a person),
    failed, cancelled or superseded, in that order. A bundle that waits on failed or unknown
    media is blocked, not in progress.
    """
    tasks = list(tasks)
    media = Counter(status for kind, status in tasks if not kinds.get(kind).completes_version)
    bundle = Counter(status for kind, status in tasks if kinds.get(kind).completes_version)
    pending = ("ready", "running", "retry")
    media_done = not any(media.get(s) for s in (*pending, "unknown", "failed", "cancelled", "superseded"))
    if any(media.get(s) for s in pending) or any(bundle.get(s) for s in ("running", "retry")) \
            or (bundle.get("ready") and media_done):
        return "cancelling" if cancel_requested else "in_progress"
    everything = media + bundle
    if everything and set(everything) == {"succeeded"}:
        return "complete"
    for status, word in (("unknown", "needs_decision"), ("failed", "failed"), ("cancelled", "cancelled"),
                         ("superseded", "superseded")):
        if everything.get(status):
            return word
    return "in_progress"


def like_pattern(query: str | None) -> str | None:
    """An ILIKE pattern that finds `query` anywhere, its own % and _ taken literally; None for no search."""
    query = (query or "").strip()
    if not query:
        return None
    return "%" + query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
