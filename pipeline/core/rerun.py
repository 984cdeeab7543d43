"""What a rerun of a dead-lettered task may change: its deadline, only when asked, and the chain of its runs.

Pure: no I/O. `pipeline.rerun` gathers the rows and applies what is decided here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from pipeline.core.errors import Conflict

MAX_EXTENSION_SECONDS = 7 * 86_400   # a week: a rerun is a person's decision, not a way to park work for ever


def rerun_deadline(deadline: datetime, now: datetime, extend_seconds: float | None) -> datetime:
    """The rerun task's deadline: unchanged unless the editor asked for `extend_seconds` more from now.

    A deadline already past, with no extension asked for, would fail the rerun at its first claim:
    refused (Conflict `deadline_passed`), saying how to ask for time.
    """
    if extend_seconds is None:
        if deadline <= now:
            raise Conflict(f"the task's deadline passed at {deadline.isoformat()}; send extend_deadline_seconds "
                           "(1 to 604800) to give the rerun time to run", code="deadline_passed",
                           details={"deadline_at": deadline.isoformat()})
        return deadline
    return max(deadline, now + timedelta(seconds=extend_seconds))


def runs(letters: list[dict], reruns: list[dict]) -> list[dict]:
    """A task's runs in order: the first, then one per rerun, each with the dead letter that ended it (if any).

    `letters` and `reruns` are in id order; each rerun names the letter it reran (`rerun_of`). A run is ended
    by the letter its successor reran, the last run by the task's open letter (if it has one).
    """
    by_id = {letter["id"]: letter for letter in letters}
    open_letter = next((letter for letter in reversed(letters) if letter["rerun_at"] is None), None)
    chain: list[dict] = [{"run": 1, "first_attempt": 1, "rerun": None}]
    for rerun in reruns:
        chain.append({"run": len(chain) + 1, "first_attempt": rerun["first_attempt"], "rerun": rerun})
    for i, run in enumerate(chain):
        successor = chain[i + 1]["rerun"] if i + 1 < len(chain) else None
        run["dead_letter"] = by_id.get(successor["rerun_of"]) if successor else open_letter
    return chain
