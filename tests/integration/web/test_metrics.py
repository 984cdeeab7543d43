"""`/metrics`: Prometheus text whose numbers come from PostgreSQL at scrape time."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from pipeline.core.errors import Ambiguous, BudgetReached, Busy, Transient


def scrape(api) -> dict[tuple[str, tuple], float]:
    response = api.client.get("/metrics")
    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def test_metrics_report_tasks_by_status_and_kind_with_zeros(api):
    api.create(2)
    samples = scrape(api)
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
    samples = scrape(api)
    assert samples[("mediapipe_unknown_tasks", ())] == 1
    assert samples[("mediapipe_task_retries_total", ())] == 1
    assert samples[("mediapipe_outbox_unsent", ())] == 2   # the retry's scheduled message and ours
    assert samples[("mediapipe_provider_calls_total", (("outcome", "ambiguous"), ("provider", "local-image")))] == 1
    assert samples[("mediapipe_provider_cost_total", (("outcome", "ambiguous"), ("provider", "local-image")))] == 0.5
    assert 1 <= samples[("mediapipe_last_reconcile_age_seconds", ())] < 60
    assert 1.9 < samples[("mediapipe_last_reconcile_duration_seconds", ())] < 2.1
    assert samples[("mediapipe_duplicate_risk_retries_total", ())] == 0
    api.post(f"/api/tasks/{tasks[0]['id']}/retry", role="editor", json={"accept_duplicate_risk": True})
    assert scrape(api)[("mediapipe_duplicate_risk_retries_total", ())] == 1


def test_expired_leases_and_the_oldest_ready_task_are_measured(api, conn):
    created = api.create(1)
    tasks = api.get(created["status_url"]).json["tasks"]
    conn.execute("UPDATE tasks SET available_at = now() - interval '90 seconds' WHERE id = %s", (tasks[1]["id"],))
    conn.execute("UPDATE tasks SET status = 'running', lease_token = gen_random_uuid(), "
                 "lease_until = now() - interval '1 second' WHERE id = %s", (tasks[0]["id"],))
    samples = scrape(api)
    assert samples[("mediapipe_expired_leases", ())] == 1
    assert 89 < samples[("mediapipe_oldest_ready_task_age_seconds", ())] < 120


def test_a_database_that_never_ran_the_reconciler_reports_no_reconcile_age(api):
    samples = scrape(api)
    assert ("mediapipe_last_reconcile_age_seconds", ()) not in samples


def test_waits_that_spend_no_attempt_are_counted_apart_from_retries(api, work):
    created = api.create(2)
    tasks = api.get(created["status_url"]).json["tasks"]
    work.executor.script[tasks[0]["id"]] = [Busy("slow down", retry_after=60)]
    work.executor.script[tasks[1]["id"]] = [BudgetReached("paused: daily budget reached", retry_after=60)]
    work.executor.script[tasks[2]["id"]] = [Transient("refused")]
    work.until_idle(rounds=1)
    samples = scrape(api)
    assert samples[("mediapipe_task_retries_total", ())] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "busy"),))] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "budget"),))] == 1
    assert samples[("mediapipe_task_waits_total", (("waiting_for", "input"),))] == 0
