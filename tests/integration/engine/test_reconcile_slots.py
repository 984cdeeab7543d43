"""Periodic runs keyed by job and time slot: one run per slot whichever machine asks, missed slots recorded."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pipeline.db import connect
from pipeline.reconcile import Reconciler

TEN_O_CLOCK = datetime(2026, 5, 4, 10, 0, tzinfo=timezone.utc)


def cron(cfg, conn, at: datetime, slot_seconds: int = 60):
    """One cron run of `bin/reconcile --slot` as it would run at `at`."""
    return Reconciler(cfg, conn, {}, now=lambda: at).run(slot_seconds)


def test_two_cron_runs_of_the_same_minute_on_two_machines_make_one_run_recorded_against_its_slot(cfg, conn):
    with connect(cfg.database_url, autocommit=True) as other_machine:
        first = cron(cfg, conn, TEN_O_CLOCK + timedelta(seconds=1))
        second = cron(cfg, other_machine, TEN_O_CLOCK + timedelta(seconds=40))
    assert (first.slot, first.slot_taken) == (TEN_O_CLOCK, False)
    assert (second.slot, second.slot_taken, second.counts) == (TEN_O_CLOCK, True, {})
    runs = conn.execute("SELECT slot, slot_seconds, finished_at FROM reconcile_runs WHERE job = 'reconcile'").fetchall()
    assert len(runs) == 1 and (runs[0]["slot"], runs[0]["slot_seconds"]) == (TEN_O_CLOCK, 60)
    assert runs[0]["finished_at"] is not None
    # the next minute is a slot of its own
    third = cron(cfg, conn, TEN_O_CLOCK + timedelta(seconds=61))
    assert (third.slot, third.slot_taken, third.missed_before) == (TEN_O_CLOCK + timedelta(minutes=1), False, 0)


def test_a_run_records_the_slots_missed_before_it_in_the_run_history(cfg, conn):
    cron(cfg, conn, TEN_O_CLOCK)
    late = cron(cfg, conn, TEN_O_CLOCK + timedelta(minutes=4, seconds=5))   # 10:01, 10:02 and 10:03 had no run
    assert late.missed_before == 3
    history = conn.execute("SELECT slot, missed_before FROM reconcile_runs WHERE job = 'reconcile' ORDER BY slot"
                           ).fetchall()
    assert [(r["slot"].minute, r["missed_before"]) for r in history] == [(0, 0), (4, 3)]


def test_retention_runs_once_per_hourly_slot_whichever_run_reaches_it(cfg, conn):
    reports = [cron(cfg, conn, TEN_O_CLOCK + timedelta(minutes=m)) for m in (0, 1, 59, 60)]
    assert [r.counts.get("retention_runs", 0) for r in reports] == [1, 0, 0, 1]
    slots = conn.execute("SELECT slot FROM reconcile_runs WHERE job = 'retention' ORDER BY slot").fetchall()
    assert [r["slot"] for r in slots] == [TEN_O_CLOCK, TEN_O_CLOCK + timedelta(hours=1)]


def test_runs_without_a_slot_run_every_time(cfg, conn):
    for _ in range(2):
        assert not Reconciler(cfg, conn, {}).run().slot_taken
    assert conn.execute("SELECT count(*) AS n FROM reconcile_runs WHERE job = 'reconcile' AND slot IS NULL"
                        ).fetchone()["n"] == 2
