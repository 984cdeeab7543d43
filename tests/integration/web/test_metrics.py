"""`/metrics`: Prometheus text whose numbers come from PostgreSQL at scrape time."""

from __future__ import annotations

import pytest

from pipeline.core.errors import Ambiguous, BudgetReached, Busy, Transient


def test_metrics_report_tasks_by_status_and_kind_with_zeros(api):
    api.create(2)
    samples = api.scrape()
    assert samples[("mediapipe_tasks", (("kind", "image"), ("status", "ready")))] == 2
    assert samples[("mediapipe_tasks", (("kind", "bundle"), ("status", "ready")))] == 1
    assert samples[("mediapipe_tasks", (("kind", "tts"), ("status", "failed")))] == 0
    assert samples[("mediapipe_outbox_unsent", ())] == 0      # sent at once by the fast path


def test_metrics_follow_the_database_not_the_process(api, work, conn):
    created = api.create(1)
    tasks = api.get(created["status_url"]).json["tasks"]
    work.executor.script[tasks[0]["id"]] = [Ambiguous("lost")]
    work.executor.script[tasks[1]["id"]] = [Transient("refused")]
    work.until_idle(rounds=1)
    conn.execute("INSERT INTO outbox (task_id, queue, available_at) VALUES (%s, 'bundle', now())", (tasks[2]["id"],))
    conn.execute("INSERT INTO provider_calls (task_id, attempt, provider, model, idempotency_key, outcome, cost) "
                 "VALUES (%s, 1, 'local-image', 'm', 'k', 'ambiguous', 0.5)", (tasks[0]["id"],))
    conn.execute("INSERT INTO reconcile_runs (started_at, finished_at) VALUES (now() - interval '3 s', now() - interval '1 s')")
    samples = api.scrape()
    assert samples[("mediapipe_unknown_tasks", ())] == 1
    assert samples[("mediapipe_task_retries_total", ())] == 1
    assert samples[("mediapipe_outbox_unsent", ())] == 2   # the retry's scheduled message and ours
    assert samples[("mediapipe_provider_calls_total", (("outcome", "ambiguous"), ("provider", "local-image")))] == 1
    assert samples[("mediapipe_provider_cost_total", (("outcome", "ambiguous"), ("provider", "local-image")))] == 0.5
    assert 1 <= samples[("mediapipe_last_reconcile_age_seconds", ())] < 60
    assert 1.9 < samples[("mediapipe_last_reconcile_duration_seconds", ())] < 2.1
    assert samples[("mediapipe_duplicate_risk_retries_total", ())] == 0
    api.post(f"/api/tasks/{tasks[0]['id']}/retry", role="editor", json={"accept_duplicate_risk": True})
    assert api.scrape()[("mediapipe_duplicate_risk_retries_total", ())] == 1


def test_expired_leases_and_the_oldest_ready_task_are_measured(api, conn):
    created = api.create(1)
    tasks = api.get(created["status_url"]).json["tasks"]
    conn.execute("UPDATE tasks SET available_at = now() - interval '90 seconds' WHERE id = %s", (tasks[1]["id"],))
    conn.execute("UPDATE tasks SET status = 'running', lease_token = gen_random_uuid(), "
                 "lease_until = now() - interval '1 second' WHERE id = %s", (tasks[0]["id"],))
    samples = api.scrape()
    assert samples[("mediapipe_expired_leases", ())] == 1
    assert 89 < samples[("mediapipe_oldest_ready_task_age_seconds", ())] < 120


def test_a_database_that_never_ran_the_reconciler_reports_no_reconcile_age(api):
    samples = api.scrape()
    assert ("mediapipe_last_reconcile_age_seconds", ()) not in samples


def test_waits_that_spend_no_attempt_are_counted_apart_from_retries(api, work):
    created = api.create(2)
    tasks = api.get(created["status_url"]).json["tasks"]
    work.executor.script[tasks[0]["id"]] = [Busy("slow down", retry_after=60)]
    work.executor.script[tasks[1]["id"]] = [BudgetReached("paused: daily budget reached", retry_after=60)]
    work.executor.script[tasks[2]["id"]] = [Transient("refused")]
    work.until_idle(rounds=1)
    samples = api.scrape()
    assert samples[("mediapipe_task_retries_total", ())] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "busy"),))] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "budget"),))] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "input"),))] == 0


def test_latency_histograms_follow_real_work_from_save_to_done(api, work):
    created = api.create(1)
    work.until_idle()
    assert api.get(created["status_url"]).json["status"] == "complete"
    samples = api.scrape()
    for kind in ("image", "tts", "bundle"):
        assert samples[("mediapipe_task_accepted_to_started_seconds_count", (("kind", kind),))] == 1
        assert samples[("mediapipe_task_run_seconds_count", (("kind", kind),))] == 1
        assert samples[("mediapipe_task_run_seconds_bucket", (("kind", kind), ("le", "+Inf")))] == 1
    assert samples[("mediapipe_version_save_to_done_seconds_count", (("lane", "interactive"),))] == 1
    total = samples[("mediapipe_version_save_to_done_seconds_sum", (("lane", "interactive"),))]
    assert 0 < total < 60
    # buckets are cumulative: a bucket never holds fewer than the one below it
    buckets = [samples[("mediapipe_task_run_seconds_bucket", (("kind", "image"), ("le", le)))]
               for le in ("0.1", "1", "10", "+Inf")]
    assert buckets == sorted(buckets)


def test_the_example_alert_rules_name_only_series_the_app_exports(api, work, conn):
    import re
    from pathlib import Path

    from pipeline.reconcile import Reconciler

    api.create(1)
    work.until_idle()
    Reconciler(work.settings, conn, {}).run()   # the reconcile age exists once a run finished
    exported = {name for name, _ in api.scrape()}
    rules = (Path(__file__).resolve().parents[3] / "docs" / "alerts.yml").read_text()
    named = set(re.findall(r"\bmediapipe_[a-z_]+", rules))
    assert named and named <= exported, named - exported


def test_outbox_rows_that_keep_failing_to_reach_redis_are_counted_as_stuck(api, conn, redis_url):
    import redis as redis_lib
    from bin.embedded import free_port
    from pipeline import dispatch
    from testkit.helpers import wait_until

    api.create(1)
    conn.execute("UPDATE outbox SET sent_at = NULL")   # as if the fast path had found Redis away
    away = redis_lib.Redis(port=free_port(), socket_connect_timeout=0.5, socket_timeout=0.5)
    for attempt in range(3):
        wait_until(lambda: conn.execute("SELECT bool_and(claim_until IS NULL OR claim_until < now()) AS free "
                                        "FROM outbox").fetchone()["free"], message="the claims running out")
        with pytest.raises(redis_lib.RedisError):
            dispatch.send_due(conn, away, claim_seconds=0.1)
    assert api.scrape()[("mediapipe_outbox_stuck", ())] == 2   # the image's and the narration's messages
    # Redis back: the rows are sent and nothing is stuck
    wait_until(lambda: conn.execute("SELECT bool_and(claim_until < now()) AS free FROM outbox").fetchone()["free"],
               message="the claims running out")
    assert dispatch.send_due(conn, redis_lib.Redis.from_url(redis_url), claim_seconds=5) == 2
    assert api.scrape()[("mediapipe_outbox_stuck", ())] == 0


def test_dead_letters_of_failed_tasks_are_counted_by_reason(api, work):
    from pipeline.core.errors import Permanent

    created = api.create(1)
    tasks = api.get(created["status_url"]).json["tasks"]
    work.executor.script[tasks[0]["id"]] = [Permanent("refused")]
    work.until_idle()
    samples = api.scrape()
    assert samples[("mediapipe_dead_letters", (("reason", "permanent error"),))] == 1
    # retried by an editor, the task is no longer failed and its dead letter no longer counts
    api.post(f"/api/tasks/{tasks[0]['id']}/retry", role="editor")
    assert ("mediapipe_dead_letters", (("reason", "permanent error"),)) not in api.scrape()


def test_missed_slots_of_the_cron_run_are_measured_recorded_and_overdue(api, work, conn):
    from datetime import datetime, timedelta, timezone

    from pipeline.reconcile import Reconciler

    def cron_at(at):
        return Reconciler(work.settings, conn, {}, now=lambda: at).run(3600)

    now = datetime.now(timezone.utc)
    # given: hourly cron runs five hours ago and none since
    cron_at(now - timedelta(hours=5))
    assert api.scrape()[("mediapipe_missed_slots", (("job", "reconcile"),))] == 4   # four slots passed with no run
    # when: the cron runs again now, it records the gap in its run; the missed slots stay counted for a day
    assert cron_at(now).missed_before == 4
    assert api.scrape()[("mediapipe_missed_slots", (("job", "reconcile"),))] == 4


def test_messages_in_redis_without_pending_work_and_sent_tasks_without_a_message_are_counted(api, redis_url):
    import redis as redis_lib

    from testkit.helpers import lesson

    # given: a lesson whose image and narration messages are in Redis, and nothing disagrees
    first = api.create(1)
    assert api.scrape()[("mediapipe_queue_disagreement", (("side", "redis_only"),))] == 0
    assert api.scrape()[("mediapipe_queue_disagreement", (("side", "database_only"),))] == 0
    # when: a new version supersedes it, its two messages stay in Redis for tasks that need no worker
    api.put(first["content_url"], json={**lesson(1, prefix="新"), "base_version": 1}, role="editor")
    samples = api.scrape()
    assert samples[("mediapipe_queue_disagreement", (("side", "redis_only"),))] == 2
    assert samples[("mediapipe_queue_disagreement", (("side", "database_only"),))] == 0
    # when: Redis loses everything, the new version's two sent tasks wait with no message
    redis_lib.Redis.from_url(redis_url).flushall()
    samples = api.scrape()
    assert samples[("mediapipe_queue_disagreement", (("side", "redis_only"),))] == 0
    assert samples[("mediapipe_queue_disagreement", (("side", "database_only"),))] == 2


def test_the_oldest_waiting_task_is_measured_per_lane(api, conn):
    from testkit.helpers import lesson

    api.create(1)
    bulk = api.post("/api/contents", json={**lesson(1, prefix="批"), "priority": "bulk"}, role="editor").json
    conn.execute("UPDATE tasks SET available_at = now() - interval '300 seconds' WHERE content_id = %s",
                 (bulk["content_id"],))
    samples = api.scrape()
    assert 299 < samples[("mediapipe_oldest_waiting_task_age_seconds", (("lane", "bulk"),))] < 400
    assert samples[("mediapipe_oldest_waiting_task_age_seconds", (("lane", "interactive"),))] < 60
