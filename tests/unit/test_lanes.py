"""The lanes' pure rules: queue names, a save's priority, pool sizes, bulk depth, deadlines, admission and the tasks
one message carries."""

import pytest

from pipeline import settings
from pipeline.core import lanes
from pipeline.core.errors import InvalidInput
from pipeline.core.lanes import BULK, INTERACTIVE, MOST_PER_MESSAGE, tasks_per_message

BASE = {"DATABASE_URL": "postgresql://h/db", "REDIS_URL": "redis://h/0", "MEDIA_DIR": "/tmp/media"}


def cfg(**env: str) -> settings.Settings:
    return settings.load({**BASE, **env})


def test_each_kind_has_an_interactive_queue_by_its_plain_name_and_a_bulk_queue_beside_it():
    assert [lanes.queue_name("image"), lanes.queue_name("tts", lanes.BULK)] == ["image", "tts-bulk"]
    assert lanes.worker_queues("bundle") == ["bundle", "bundle-bulk"]   # interactive first
    assert len(lanes.all_queues()) == 8
    with pytest.raises(ValueError):
        lanes.queue_name("poster")


@pytest.mark.parametrize("value", ["urgent", 1, None, ""])
def test_a_priority_other_than_the_two_lanes_is_refused_naming_the_field(value):
    with pytest.raises(InvalidInput) as refused:
        lanes.parse_priority(value)
    assert refused.value.field == "priority"


def test_the_pools_together_have_one_worker_per_call_slot():
    c = cfg(IMAGE_MAX_CONCURRENCY="6", IMAGE_INTERACTIVE_SLOTS="2")
    assert (lanes.workers(c, "image"), lanes.interactive_workers(c, "image")) == (4, 2)
    assert lanes.bulk_depth(c, "image") == 12
    assert lanes.bulk_depth(cfg(BULK_QUEUE_DEPTH="3"), "image") == 3


def test_a_bulk_save_leaves_a_tenth_of_the_pending_limit_and_waits_a_batch_window_when_batched():
    c = cfg(MAX_PENDING_TASKS="1000")
    assert (lanes.admission_limit(c, lanes.BULK), lanes.admission_limit(c, lanes.INTERACTIVE)) == (900, 1000)
    assert lanes.deadline_seconds(c, lanes.BULK) == c.deadline_seconds
    batched = cfg(IMAGE_BULK_BACKEND="batch", IMAGE_PROVIDER="openai",
                  IMAGE_BASE_URL="https://api.openai.com/v1", IMAGE_API_KEY="k", IMAGE_DAILY_BUDGET="10")
    assert lanes.deadline_seconds(batched, lanes.BULK) == lanes.BATCH_WINDOW_SECONDS + 3600


def test_an_interactive_message_carries_one_task_until_every_worker_has_several_messages_waiting():
    # a save's ten images on an idle queue with four workers: one task a message, every worker starts at once
    assert tasks_per_message(INTERACTIVE, waiting=0, new=10, workers=4) == 1
    # forty images for two idle workers: eight messages of five leave each worker four
    assert tasks_per_message(INTERACTIVE, waiting=0, new=40, workers=2) == 5
    # six messages already wait for two workers: two more make eight, so the new ones carry five each
    assert tasks_per_message(INTERACTIVE, waiting=6, new=10, workers=2) == 5
    # once every worker has four messages waiting, eight tasks a message, never more
    assert tasks_per_message(INTERACTIVE, waiting=8, new=10, workers=2) == MOST_PER_MESSAGE == 8
    assert tasks_per_message(INTERACTIVE, waiting=10_000, new=100, workers=1) == 8


def test_bulk_messages_and_queues_nobody_listens_to_carry_one_task():
    assert tasks_per_message(BULK, waiting=10_000, new=10, workers=1) == 1
    assert tasks_per_message(INTERACTIVE, waiting=10_000, new=10, workers=0) == 1


def test_a_large_save_runs_in_the_bulk_lane_unless_an_admin_insists():
    from pipeline.core.lanes import save_lane
    assert save_lane(None, 50, bulk_from=50, may_insist=False) == ("interactive", None)
    lane, why = save_lane(None, 51, bulk_from=50, may_insist=False)
    assert lane == "bulk" and "51 blocks, over BULK_SAVE_BLOCKS=50" in why
    assert save_lane("interactive", 51, bulk_from=50, may_insist=False)[0] == "bulk"     # an editor cannot insist
    assert save_lane("interactive", 51, bulk_from=50, may_insist=True) == ("interactive", None)
    assert save_lane(None, 51, bulk_from=50, may_insist=True)[0] == "bulk"              # only when asked
    assert save_lane("bulk", 2, bulk_from=50, may_insist=False) == ("bulk", None)
