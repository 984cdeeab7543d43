"""The delivery gate's decision, from task rows alone (pipeline/core/delivery.py)."""

from pipeline.core.delivery import delivery_blockers


def rows(*statuses):
    return [{"id": i, "status": status} for i, status in enumerate(statuses, 1)]


def test_an_approved_version_whose_tasks_all_succeeded_has_no_blockers():
    assert delivery_blockers(2, 3, rows("succeeded", "succeeded")).reasons == ()


def test_each_kind_of_unfinished_task_is_named_with_its_ids():
    found = delivery_blockers(None, 1, rows("running", "unknown", "failed", "superseded", "succeeded"))
    assert found.reasons == ("not_approved", "pending", "unknown", "failed", "cancelled")
    assert (found.pending, found.unknown, found.failed, found.cancelled) == ((1,), (2,), (3,), (4,))
    assert found.as_dict()["version"] == 1
