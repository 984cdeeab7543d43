"""The reconciler against lost messages, dead dispatchers, concurrent runs and a large history."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from pipeline import storage, versions
from pipeline.db import connect
from pipeline.reconcile import Reconciler
from testkit.helpers import EDITOR, draft, wait_until
from testkit.system import drain


def test_flushall_with_fifty_tasks_queued_loses_nothing_and_runs_nothing_twice(system, fake):
    with system.db() as conn:
        saved = [versions.save(conn, draft(8, prefix=str(i)), system.cfg, by=EDITOR) for i in range(3)]
    system.dispatch()
    client = redis.Redis.from_url(system.env["REDIS_URL"])
    queued = sum(client.llen(f"rq:queue:{q}") for q in ("image", "tts"))
    assert queued == 48
    # when Redis loses everything before any worker ran
    client.flushall()
    for queue in ("image", "tts", "bundle"):
        system.start_worker(queue)
    for s in saved:
        assert {r["status"] for r in drain(system, s.content_id, timeout=90)} == {"succeeded"}
    with system.db() as conn:
        calls = conn.execute("SELECT idempotency_key, count(*) AS n FROM provider_calls "
                             "WHERE outcome <> 'reused' GROUP BY 1").fetchall()
        rows_before = conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"]
    assert calls and max(c["n"] for c in calls) == 1
    assert all(fake.calls_for(c["idempotency_key"]).requests == 1 for c in calls)
    for _ in range(3):
        system.reconcile()
    with system.db() as conn:
        assert conn.execute("SELECT count(*) AS n FROM outbox").fetchone()["n"] == rows_before


def test_rows_claimed_by_a_dead_dispatcher_are_sent_after_the_claim_lease(system):
    with system.db() as conn:
        versions.save(conn, draft(1), system.cfg, by=EDITOR)
        # given a dispatcher that claimed the rows and died before enqueueing them (a claim held long enough that
        # no slow start of the command below can outlive it)
        claimed = conn.execute("UPDATE outbox SET claim_token = gen_random_uuid(), claim_until = now() + "
                               "interval '10 minutes' RETURNING id").fetchall()
    assert len(claimed) == 2
    assert "sent 0" in system.dispatch()          # still held by the dead claim
    with system.db() as conn:                      # the dead claim's lease runs out
        claimed = conn.execute("UPDATE outbox SET claim_until = now() - interval '1 millisecond' "
                               "RETURNING id, claim_until").fetchall()
    # then the command itself, as cron or a person runs it, sends them
    sent = system.run("dispatch", "--once")
    assert sent.returncode == 0 and "sent 2" in sent.stdout, sent.stdout + sent.stderr
    with system.db() as conn:
        rows = conn.execute("SELECT sent_at, claim_until FROM outbox ORDER BY id").fetchall()
    assert all(r["sent_at"] >= c["claim_until"] for r, c in zip(rows, claimed))


@pytest.mark.server_major
def test_two_reconcile_runs_at_once_one_works_and_the_other_exits_zero(system):
    with system.db() as holder:
        holder.execute("SELECT pg_advisory_lock(7411003)")
        result = system.run("reconcile")
        assert result.returncode == 0 and "another reconcile run holds the lock" in result.stdout
        holder.execute("SELECT pg_advisory_unlock(7411003)")
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: system.run("reconcile"), range(2)))
    assert [r.returncode for r in results] == [0, 0]
    with system.db() as conn:
        runs = conn.execute("SELECT started_at, finished_at FROM reconcile_runs WHERE job = 'reconcile' "
                            "ORDER BY id").fetchall()   # the retention job's runs are inside them
    for earlier, later in zip(runs, runs[1:]):
        assert later["started_at"] >= earlier["finished_at"]   # never two at once


@pytest.mark.server_major
def test_two_cron_runs_of_one_slot_make_one_run_and_the_second_says_so(system):
    # given: daily slots, and a minute clear of midnight UTC, so both runs fall in the same slot
    cron = system.with_env(RECONCILE_SLOT_SECONDS="86400")
    wait_until(lambda: 86_400 - time.time() % 86_400 > 60, timeout=70, interval=1, message="a minute clear of midnight")
    first, second = cron.run("reconcile", "--slot"), cron.run("reconcile", "--slot")
    assert (first.returncode, second.returncode) == (0, 0)
    assert "already had its run" not in first.stdout and "already had its run" in second.stdout
    with cron.db() as conn:
        runs = conn.execute("SELECT slot, slot_seconds, finished_at FROM reconcile_runs WHERE job = 'reconcile'"
                            ).fetchall()
    assert len(runs) == 1 and runs[0]["slot_seconds"] == 86_400 and runs[0]["finished_at"] is not None
    assert runs[0]["slot"].timestamp() % 86_400 == 0


def test_a_reconcile_run_over_a_large_history_works_in_bounded_batches(system, capsys):
    batch = 200
    with system.db() as conn:
        versions.save(conn, draft(1), system.cfg, by=EDITOR)
        conn.execute("""
            INSERT INTO versions (content_id, version, title, locale, blocks, digest, saved_by, deadline_at)
            SELECT 1, 1 + g, 't', 'zh', '[]', 'd', 'e', now() + interval '1 hour' FROM generate_series(1, 1) g;
            UPDATE contents SET current_version = 2;
            INSERT INTO tasks (content_id, version, kind, block_key, input, fingerprint, status, attempts,
                               max_attempts, deadline_at, asset_sha256)
            SELECT 1, 2, 'image', 'h' || g, '{}', repeat('a', 64), 'succeeded', 1, 3, now(), repeat('b', 64)
            FROM generate_series(1, 100000) g;
        """)
        # expired leases of workers that wrote their receipts where this reconciler looks
        conn.execute("""
            INSERT INTO tasks (content_id, version, kind, block_key, input, fingerprint, status, attempts,
                               max_attempts, deadline_at, lease_token, lease_until, receipt_store)
            SELECT 1, 2, 'tts', 'x' || g, '{}', repeat('c', 64), 'running', 1, 3, now() + interval '1 hour',
                   gen_random_uuid(), now() - interval '1 second', %(store)s
            FROM generate_series(1, 1000) g;
        """, {"store": storage.receipt_book(system.cfg).store_id()})
    started = time.monotonic()
    with connect(system.env["DATABASE_URL"], autocommit=True) as conn:
        report = Reconciler(system.cfg, conn, {}, batch=batch).run()
    elapsed = time.monotonic() - started
    assert report.counts["expired_retry"] == 1000 and report.errors == 0
    with system.db() as conn:
        # rows changed by one transaction share its xmin: no transaction moved more than a batch
        biggest = conn.execute("SELECT max(n) AS n FROM (SELECT xmin, count(*) AS n FROM tasks "
                               "WHERE kind = 'tts' AND version = 2 GROUP BY xmin) s").fetchone()["n"]
        left = conn.execute("SELECT count(*) AS n FROM tasks WHERE status = 'running'").fetchone()["n"]
    assert biggest <= batch and left == 0
    with capsys.disabled():
        print(f"\n  reconcile over 100,000 finished tasks and 1,000 expired leases: {elapsed:.2f} s (one run, batch {batch})")
