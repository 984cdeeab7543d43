"""The approval record of a content, derived from its events alone: who approved, withdrew or replaced which
version, and when; and from that, which version is approved now and by whom. Pure: no I/O.

The events are the record (an `approved` or `approval_withdrawn` row per decision, written in the decision's
transaction); nothing here reads a stamp kept on the version, so a withdrawal can never leave a version looking
approved, and a second approval of a version names the person who gave it, not the first one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

# The events a content's approval record is made of (their `action`), as review.py writes them.
APPROVAL_EVENTS = ("approved", "approval_withdrawn")


@dataclass(frozen=True)
class Step:
    """One step of the record. `replaced`: the approval of `version` ended because `by` approved `by_version`."""

    action: str                    # approved, withdrawn, replaced
    version: int
    by: str
    at: datetime
    note: str | None = None        # a withdrawal's reason
    by_version: int | None = None  # replaced: the version approved in its place

    def as_dict(self) -> dict:
        return {"action": self.action, "version": self.version, "by": self.by, "at": self.at, "note": self.note,
                "by_version": self.by_version}


@dataclass(frozen=True)
class Record:
    current: Step | None     # the approval in force (an `approved` step), or None
    history: tuple[Step, ...]

    @property
    def approved_version(self) -> int | None:
        return self.current.version if self.current else None

    def approval_of(self, version: int) -> Step | None:
        """The approval in force if it is `version`'s."""
        return self.current if self.current and self.current.version == version else None


def record(events: Iterable[Mapping]) -> Record:
    """The record from a content's approval events (rows with `action`, `version`, `actor`, `reason`, `at`), oldest
    first. An approval of another version replaces the one in force; a withdrawal leaves none in force."""
    current: Step | None = None
    history: list[Step] = []
    for event in events:
        if event["action"] == "approved":
            if current is not None and current.version != event["version"]:
                history.append(Step("replaced", current.version, event["actor"], event["at"],
                                    by_version=event["version"]))
            current = Step("approved", event["version"], event["actor"], event["at"])
            history.append(current)
        elif event["action"] == "approval_withdrawn":
            history.append(Step("withdrawn", event["version"], event["actor"], event["at"], note=event["reason"]))
            current = None
    return Record(current, tuple(history))
