"""The delivery gate's decision: why a version cannot be delivered (empty when it can). Pure."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

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
