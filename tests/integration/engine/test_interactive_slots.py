"""The interactive lane's share of a provider's call slots: the bulk lane may not hold the last
IMAGE_INTERACTIVE_SLOTS of them, and interactive calls take those first, so an editor's call finds a
slot at once while an import keeps every other slot busy."""

import uuid

import pytest

from pipeline.core.errors import Busy, SlotsBusy
from pipeline import slots
from pipeline.core.lanes import BULK, INTERACTIVE
from testkit.helpers import make_settings

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def take(conn, p, lane):
    with conn.transaction():
        return slots.hold(conn, "images:image", p, kind="image", holder=uuid.uuid4(), lane=lane)


def test_the_bulk_lane_holds_at_most_its_share_and_the_interactive_lane_finds_the_rest(conn, database_url,
                                                                                        redis_url, tmp_path):
    p = make_settings(database_url, redis_url, tmp_path, IMAGE_MAX_CONCURRENCY="4").providers["image"]
    assert (p.reserved_slots, p.bulk_slots) == (1, 3)
    assert [take(conn, p, BULK) for _ in range(3)] == [1, 2, 3]
    with pytest.raises(SlotsBusy, match="none of the 3 call slots the bulk lane may use is free to it"):
        take(conn, p, BULK)
    assert take(conn, p, INTERACTIVE) == 4        # the held-back slot, free for the editor
    with pytest.raises(SlotsBusy, match="all 4 call slots are in use"):
        take(conn, p, INTERACTIVE)


def test_interactive_calls_take_the_held_back_slots_first_and_leave_the_bulk_lanes_to_it(conn, database_url,
                                                                                         redis_url, tmp_path):
    p = make_settings(database_url, redis_url, tmp_path, IMAGE_MAX_CONCURRENCY="4",
                      IMAGE_INTERACTIVE_SLOTS="2").providers["image"]
    assert [take(conn, p, INTERACTIVE) for _ in range(3)] == [4, 3, 2]
    assert take(conn, p, BULK) == 1
    with pytest.raises(Busy):
        take(conn, p, BULK)


def test_with_no_held_back_slot_the_bulk_lane_may_take_them_all(conn, database_url, redis_url, tmp_path):
    p = make_settings(database_url, redis_url, tmp_path, IMAGE_MAX_CONCURRENCY="2", IMAGE_INTERACTIVE_SLOTS="0").providers["image"]
    assert [take(conn, p, BULK) for _ in range(2)] == [1, 2]
