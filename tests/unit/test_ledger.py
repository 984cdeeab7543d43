"""What the call ledger adds up to (pipeline/core/ledger.py): a version's spend and a period's totals."""

from decimal import Decimal

from pipeline.core.ledger import dollars, totals, version_spend


def call(id_: int, task_id: int, outcome: str, cost, *, charged: bool, accepted_by: str | None = None) -> dict:
    return {"id": id_, "task_id": task_id, "attempt": id_, "kind": "image", "block_key": "a", "provider": "p",
            "model": "m", "outcome": outcome, "http_status": 200, "latency_ms": 5, "accepted_by": accepted_by,
            "at": None, "cost": cost, "charged": charged}


def test_a_version_spend_names_the_task_that_may_have_been_paid_twice_and_who_accepted_it():
    # given a task whose first call's outcome was unknown, retried by a person who accepted the risk, and a reuse
    calls = [call(1, 7, "ambiguous", Decimal("0.04"), charged=True),
             call(2, 7, "succeeded", Decimal("0.04"), charged=True, accepted_by="editor@example.com"),
             call(3, 8, "reused", 0, charged=False), call(4, 9, "succeeded", 0.011, charged=True)]
    spend = version_spend(calls)
    # then two calls were made besides the reuse, and only task 7 was charged more than once
    assert (spend["calls"], spend["reused"], spend["estimated_cost"]) == (3, 1, 0.091)
    assert spend["by_outcome"] == {"ambiguous": 1, "reused": 1, "succeeded": 2}
    assert spend["paid_more_than_once"] == [{"task_id": 7, "kind": "image", "block": "a", "charged_calls": 2,
                                             "cost": 0.08, "accepted_by": "editor@example.com"}]
    assert [row["cost"] for row in spend["ledger"]] == [0.04, 0.04, 0.0, 0.011]


def test_totals_count_paid_calls_reuses_provider_replays_and_calls_never_sent_apart():
    def row(outcome: str, n: int, cost: float, charged: bool) -> dict:
        return {"outcome": outcome, "n": n, "cost": cost, "estimated": cost, "reported": 0.0, "with_reported": 0,
                "batch_lines": 0, "batch_savings": 0.0, "charged": charged}
    ledger = [row("succeeded", 3, 0.12, True), row("ambiguous", 1, 0.04, True), row("reused", 2, 0.0, False),
              row("replayed", 1, 0.0, False), row("transient", 4, 0.0, False), row("permanent", 1, 0.0, False)]
    got = totals(ledger)
    assert (got["paid_calls"], got["cost"], got["reuses"], got["replays"], got["refused_or_not_sent"]) == (
        4, 0.16, 2, 1, 5)
    assert dollars(None) == 0.0 and dollars(Decimal("1.23456789")) == 1.234568
