"""The board's decisions and the approval rule, from tasks' kinds and states alone."""

import pytest

from pipeline.core.board import FINISHED, TERMINAL_NAMES, version_status
from pipeline.core.delivery import approval_blockers


@pytest.mark.parametrize("tasks,cancel,expected", [
    ([("image", "running"), ("tts", "succeeded"), ("bundle", "ready")], False, "in_progress"),
    ([("image", "running"), ("bundle", "ready")], True, "cancelling"),
    ([("image", "succeeded"), ("tts", "succeeded"), ("bundle", "ready")], False, "in_progress"),
    ([("image", "succeeded"), ("tts", "succeeded"), ("bundle", "succeeded")], False, "complete"),
    ([("image", "unknown"), ("tts", "failed"), ("bundle", "ready")], False, "needs_decision"),
    ([("image", "failed"), ("tts", "succeeded"), ("bundle", "ready")], False, "failed"),
    ([("image", "cancelled"), ("bundle", "cancelled")], True, "cancelled"),
    ([("image", "superseded"), ("bundle", "superseded")], False, "superseded"),
])
def test_a_versions_status_is_one_word_from_its_tasks(tasks, cancel, expected):
    assert version_status(tasks, cancel) == expected


def test_a_version_waiting_on_a_decision_is_not_terminal_but_a_failed_one_is():
    # the reconciler may still settle an unknown outcome by lookup; a failed task waits for a person
    assert version_status([("image", "unknown"), ("bundle", "ready")]) not in FINISHED
    assert version_status([("image", "failed"), ("bundle", "ready")]) in FINISHED
    assert "unknown" not in TERMINAL_NAMES and {"failed", "succeeded"} <= TERMINAL_NAMES


def task(id, kind, status, block="b1"):
    return {"id": id, "kind": kind, "status": status, "block_key": block}


def test_a_version_whose_media_all_succeeded_may_be_approved_before_its_bundle_is_made():
    tasks = [task(1, "image", "succeeded"), task(2, "tts", "succeeded"), task(3, "bundle", "ready", None)]
    assert approval_blockers(tasks, version=2, approved_version=1) == []


def test_approval_waits_for_every_medium_and_names_the_ones_still_waiting():
    tasks = [task(1, "image", "ready"), task(2, "tts", "unknown"), task(3, "image", "succeeded", "b2"),
             task(4, "bundle", "ready", None)]
    (blocker,) = approval_blockers(tasks, version=1, approved_version=None)
    assert blocker.code == "version_incomplete" and [t["id"] for t in blocker.waiting] == [1, 2]
    assert blocker.summary() == "not every image and narration has succeeded: 1 ready, 1 unknown"


def test_a_version_older_than_the_approved_one_is_never_approved_again():
    tasks = [task(1, "image", "succeeded")]
    (blocker,) = approval_blockers(tasks, version=2, approved_version=3)
    assert blocker.code == "older_than_approved" and blocker.approved_version == 3
    assert approval_blockers(tasks, version=3, approved_version=3) == []
