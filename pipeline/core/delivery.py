"""The two gates' decisions: why a version cannot be approved, and why it cannot be delivered. Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

from pipeline.core import kinds
from pipeline.core.states import PENDING, TaskStatus


@dataclass(frozen=True)
class Blockers:
    """Why a version cannot be delivered; empty when it can."""

    version: int | None
    not_approved: bool = False
    pending: tuple[int, ...] = ()
    unknown: tuple[int, ...] = ()
    failed: tuple[int, ...] = ()
    cancelled: tuple[int, ...] = ()     # superseded or cancelled: this version will never complete
    reasons: tuple[str, ...] = field(default=())
    withdrawn: dict | None = None       # the withdrawn approval (version, by, at, note) when that is why

    def as_dict(self) -> dict:
        doc = {"version": self.version, "reasons": list(self.reasons), "pending": list(self.pending),
               "unknown": list(self.unknown), "failed": list(self.failed), "cancelled": list(self.cancelled)}
        if self.withdrawn is not None:
            doc["withdrawn"] = self.withdrawn
        return doc


def delivery_blockers(approved_version: int | None, current_version: int, rows: Iterable[dict],
                      withdrawn: dict | None = None) -> Blockers:
    """Why the approved version (or, with none approved, the current one) cannot be delivered. Pure.

    `withdrawn`: with no version approved, the approval last withdrawn (its reason joins the reasons)."""
    groups: dict[str, list[int]] = {"pending": [], "unknown": [], "failed": [], "cancelled": []}
    for task in rows:
        status = TaskStatus(task["status"])
        if status in PENDING:
            groups["pending"].append(task["id"])
        elif status is TaskStatus.UNKNOWN:
            groups["unknown"].append(task["id"])
        elif status is TaskStatus.FAILED:
            groups["failed"].append(task["id"])
        elif status is not TaskStatus.SUCCEEDED:
            groups["cancelled"].append(task["id"])
    withdrawn = withdrawn if approved_version is None else None
    reasons = (["not_approved"] if approved_version is None else []) + (["approval_withdrawn"] if withdrawn else []) \
        + [k for k, ids in groups.items() if ids]
    return Blockers(approved_version or current_version or None, approved_version is None,
                    *(tuple(groups[k]) for k in ("pending", "unknown", "failed", "cancelled")),
                    reasons=tuple(reasons), withdrawn=withdrawn)


@dataclass(frozen=True)
class ApprovalBlocker:
    """One reason a version cannot be approved: `older_than_approved` or `version_incomplete`."""

    code: str
    approved_version: int | None = None
    waiting: tuple[dict, ...] = ()      # the media tasks not succeeded, as given

    def summary(self) -> str:
        """The board's sentence (web.words translates it)."""
        if self.code == "older_than_approved":
            return f"version {self.approved_version} is already approved; an older version cannot be approved"
        states = Counter(t["status"] for t in self.waiting)
        return "not every image and narration has succeeded: " + ", ".join(
            f"{n} {s}" for s, n in sorted(states.items()))


def approval_blockers(tasks: Iterable[dict], *, version: int,
                      approved_version: int | None) -> list[ApprovalBlocker]:
    """Why a reviewer cannot approve `version` now; empty when they can. Pure.

    A version older than the approved one is never approved again; a version is approved only when every
    task of it but the bundle has succeeded (its images, narrations and video)."""
    blockers = []
    if approved_version is not None and version < approved_version:
        blockers.append(ApprovalBlocker("older_than_approved", approved_version=approved_version))
    waiting = tuple(t for t in tasks if not kinds.get(t["kind"]).completes_version
                    and t["status"] != TaskStatus.SUCCEEDED.value)
    if waiting:
        blockers.append(ApprovalBlocker("version_incomplete", waiting=waiting))
    return blockers
