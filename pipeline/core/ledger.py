"""What the call ledger (provider_calls) adds up to: a version's spend, a period's totals, and dollars as the
pages and the API show them. Pure: no I/O. `pipeline.overview` and `pipeline.spend` read the rows.
"""

from __future__ import annotations

from collections import Counter
from decimal import Decimal
from typing import Iterable

NOT_SENT = ("permanent", "transient", "busy")   # outcomes of calls that were refused or never reached the provider


def dollars(value: Decimal | float | int | None) -> float:
    """An amount of the ledger as a float to the micro-dollar (None is nothing spent)."""
    return round(float(value or 0), 6)


def version_spend(calls: Iterable[dict]) -> dict:
    """A version's calls made and reused, by outcome, estimated cost, and tasks possibly paid more than once."""
    calls = list(calls)
    outcomes = Counter(c["outcome"] for c in calls)
    charged: dict[int, list[dict]] = {}
    for call in calls:
        if call["charged"]:   # call_may_have_charged, in SQL
            charged.setdefault(call["task_id"], []).append(call)
    twice = [{"task_id": task_id, "kind": rows[0]["kind"], "block": rows[0]["block_key"],
              "charged_calls": len(rows), "cost": dollars(sum(dollars(r["cost"]) for r in rows)),
              "accepted_by": next((r["accepted_by"] for r in reversed(rows) if r["accepted_by"]), None)}
             for task_id, rows in charged.items() if len(rows) > 1]
    return {"calls": len(calls) - outcomes.get("reused", 0), "reused": outcomes.get("reused", 0),
            "by_outcome": dict(sorted(outcomes.items())), "estimated_cost": dollars(sum(dollars(c["cost"]) for c in calls)),
            "paid_more_than_once": twice,
            "ledger": [{k: c[k] for k in ("id", "task_id", "attempt", "kind", "block_key", "provider", "model",
                                          "outcome", "http_status", "latency_ms", "accepted_by", "at")}
                       | {"cost": dollars(c["cost"])} for c in calls]}


def totals(ledger: list[dict]) -> dict:
    """The totals of ledger rows grouped by outcome (`provider_calls_summary_*`): paid calls, cost estimated and
    reported, the batch lane's lines and savings, reuses, provider replays, and calls refused or never sent."""
    paid = [r for r in ledger if r["charged"]]
    return {"paid_calls": sum(r["n"] for r in paid), "cost": dollars(sum(r["cost"] for r in ledger)),
            "estimated": dollars(sum(r["estimated"] for r in ledger)),
            "reported": dollars(sum(r["reported"] for r in ledger)),
            "calls_with_reported_usage": sum(r["with_reported"] for r in ledger),
            "batch_lines": sum(r["batch_lines"] for r in ledger),
            "batch_savings": dollars(sum(r["batch_savings"] for r in ledger)),
            "reuses": sum(r["n"] for r in ledger if r["outcome"] == "reused"),
            "replays": sum(r["n"] for r in ledger if r["outcome"] == "replayed"),
            "refused_or_not_sent": sum(r["n"] for r in ledger if r["outcome"] in NOT_SENT)}
