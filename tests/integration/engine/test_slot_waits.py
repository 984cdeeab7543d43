"""Waiting for a call slot costs nothing while it lasts: the waiters are woken as slots free, as many as are free,
interactive work first, and the bulk lane takes no slot while interactive work of its kind waits for one."""

import uuid

import pytest

from pipeline import db, pauses, versions
from pipeline.db import connect
from pipeline.core.errors import SlotsBusy
from pipeline.executor import build_providers
from pipeline.slots import hold as hold_one
from pipeline.reconcile import Reconciler
from pipeline.core.lanes import BULK, INTERACTIVE
from pipeline.core.principal import Principal
from testkit.helpers import EDITOR, draft, make_settings

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

PROVIDER = "images:image"


def image_settings(database_url, redis_url, tmp_path):
    p = make_settings(database_url, redis_url, tmp_path, IMAGE_MAX_CONCURRENCY="4").providers["image"]
    assert (p.reserved_slots, p.bulk_slots) == (1, 3)
    return p


def waiting_for_a_slot(conn, cfg, blocks: int, lane: str) -> list[int]:
    """A saved version's image tasks, parked as a claim that found no slot parks them (for a minute)."""
    saved = versions.save(conn, draft(blocks, prefix=f"{lane}-{uuid.uuid4().hex[:6]}"), cfg, by=EDITOR, lane=lane)
    ids = [r["id"] for r in conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = 'image' ORDER BY id",
                                         (saved.content_id,))]
    conn.execute("UPDATE tasks SET status = 'retry', waiting_for = 'slot', available_at = now() + interval '60 s' "
                 "WHERE id = ANY(%s)", (ids,))
    conn.execute("UPDATE outbox SET available_at = now() + interval '60 s' WHERE task_id = ANY(%s)", (ids,))
    return ids


def hold(conn, slots: list[int]) -> None:
    db.execute(conn, "provider_slots_ensure", {"provider": PROVIDER, "max": 4})
    conn.execute("UPDATE provider_slots SET holder = gen_random_uuid(), held_until = now() + interval '10 min' "
                 "WHERE provider = %s AND slot = ANY(%s)", (PROVIDER, slots))


def free(conn, slots: list[int]) -> None:
    conn.execute("UPDATE provider_slots SET holder = NULL, held_until = NULL WHERE provider = %s AND slot = ANY(%s)",
                 (PROVIDER, slots))


def wake(conn, bulk_slots: int = 3) -> int:
    return len(db.all(conn, "provider_slots_wake", {"kind": "image", "provider": PROVIDER, "bulk_slots": bulk_slots}))


def due(conn, ids: list[int]) -> list[int]:
    """Of these tasks, those whose task and outbox row are both due now (the dispatcher sends them)."""
    return [r["id"] for r in conn.execute(
        "SELECT t.id FROM tasks t JOIN outbox o ON o.task_id = t.id AND o.sent_at IS NULL "
        "WHERE t.id = ANY(%s) AND t.available_at <= now() AND o.available_at <= now() ORDER BY t.id", (ids,))]


def test_a_freed_slot_wakes_one_waiter_interactive_first_and_never_more_than_the_free_slots(conn, cfg):
    bulk = waiting_for_a_slot(conn, cfg, 3, BULK)
    editor = waiting_for_a_slot(conn, cfg, 2, INTERACTIVE)
    hold(conn, [1, 2, 3, 4])
    assert wake(conn) == 0 and due(conn, bulk + editor) == []

    free(conn, [4])
    assert wake(conn) == 1
    assert due(conn, bulk + editor) == editor[:1]          # the editor's older task, before any bulk one
    assert wake(conn) == 0                                 # the woken one is on its way to that slot

    free(conn, [1, 2])
    assert wake(conn) == 2
    assert due(conn, bulk + editor) == [bulk[0]] + editor  # the editor's second, then the oldest bulk task


def test_bulk_waiters_already_due_but_waiting_for_room_in_the_bulk_queues_do_not_hold_back_an_editor(conn, cfg):
    bulk = waiting_for_a_slot(conn, cfg, 3, BULK)
    conn.execute("UPDATE tasks SET available_at = now() WHERE id = ANY(%s)", (bulk,))   # their timers ran out,
    conn.execute("UPDATE outbox SET available_at = now() WHERE task_id = ANY(%s)", (bulk,))   # the queues are full
    editor = waiting_for_a_slot(conn, cfg, 1, INTERACTIVE)
    hold(conn, [1, 2, 3, 4])
    free(conn, [4])
    assert wake(conn) == 1 and due(conn, editor) == editor


def test_bulk_waiters_are_woken_only_for_slots_the_bulk_lane_may_hold_and_not_while_it_is_paused(conn, cfg):
    bulk = waiting_for_a_slot(conn, cfg, 2, BULK)
    hold(conn, [1, 2, 3, 4])
    free(conn, [4])                                        # the held-back slot: the bulk lane may not take it
    assert wake(conn) == 0 and due(conn, bulk) == []

    pauses.pause(conn, by=Principal.without_key("ops", role="admin"))
    free(conn, [1])
    assert wake(conn) == 0 and due(conn, bulk) == []
    pauses.resume(conn, by=Principal.without_key("ops", role="admin"))
    assert wake(conn) == 1 and due(conn, bulk) == bulk[:1]


def test_the_bulk_lane_takes_no_slot_while_interactive_work_of_its_kind_waits_for_one(conn, cfg, database_url,
                                                                                      redis_url, tmp_path):
    p = image_settings(database_url, redis_url, tmp_path)

    def take(lane):
        with conn.transaction():
            return hold_one(conn, PROVIDER, p, kind="image", holder=uuid.uuid4(), lane=lane)

    editor = waiting_for_a_slot(conn, cfg, 1, INTERACTIVE)
    with pytest.raises(SlotsBusy, match="bulk lane"):
        take(BULK)                                         # three of its slots are free, but the editor is first
    assert take(INTERACTIVE) == 4
    conn.execute("UPDATE tasks SET status = 'ready', waiting_for = NULL WHERE id = ANY(%s)", (editor,))
    assert take(BULK) == 1                                 # nobody interactive waits now



def test_the_dispatchers_scan_wakes_waiters_for_slots_that_ran_out_even_while_a_reconcile_run_holds_the_lock(
        conn, cfg):
    providers = build_providers(cfg)
    name = f"{providers['image'].name}:image"
    editor = waiting_for_a_slot(conn, cfg, 1, INTERACTIVE)
    db.execute(conn, "provider_slots_ensure", {"provider": name, "max": cfg.providers["image"].max_concurrency})
    conn.execute("UPDATE provider_slots SET holder = gen_random_uuid(), held_until = now() - interval '1 s' "
                 "WHERE provider = %s", (name,))   # every slot's hold ran out: nobody released them
    with connect(cfg.database_url, autocommit=True) as run:
        assert db.one(run, "reconcile_try_lock")["locked"]   # a reconcile run in progress
        report = Reconciler(cfg, conn, providers).scan()
    assert not report.locked and report.counts["slot_waiters_woken"] == 1
    assert due(conn, editor) == editor
