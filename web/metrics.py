"""`GET /metrics`: Prometheus text, with every number read from PostgreSQL at scrape time.

Counting in process memory would give each gunicorn worker its own story; reading the
database makes every process (and every replica) report the same truth. Each read is
bounded (pipeline.overview.gauges): counters kept by triggers, partial indexes.

Where Redis and PostgreSQL disagree about what is queued is read from both at scrape time
(pipeline.drift); with Redis away that gauge is left out, the others stay.

Who may scrape: with METRICS_TOKEN set, a request carrying `Authorization: Bearer
<METRICS_TOKEN>` (401 otherwise); without it, only a direct call from this machine
(web.security.direct_loopback: loopback peer and Host, no proxy headers), 403 otherwise.
"""

from __future__ import annotations

from typing import Iterator

import redis

from flask import Blueprint, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from pipeline import drift, overview, servers
from pipeline.core.lanes import LANES
from pipeline.core import kinds
from pipeline.core.states import TaskStatus
from web.db import get_conn, get_redis, settings
from web.errors import Problem
from web.security import bearer_matches, direct_loopback

bp = Blueprint("metrics", __name__)

# Finished tasks (succeeded, superseded, cancelled) are history: counting them would scan it.
GAUGED_STATUSES = (TaskStatus.READY, TaskStatus.RUNNING, TaskStatus.RETRY, TaskStatus.UNKNOWN, TaskStatus.FAILED)
SNAPSHOT_GAUGES = {
    "oldest_ready_seconds": ("mediapipe_oldest_ready_task_age_seconds",
                             "Age of the oldest task that is due and runnable but not yet claimed"),
    "outbox_unsent": ("mediapipe_outbox_unsent", "Outbox messages not yet sent to RQ"),
    "outbox_stuck": ("mediapipe_outbox_stuck", "Unsent outbox messages whose send to Redis failed 3 times or more"),
    "outbox_oldest_seconds": ("mediapipe_outbox_oldest_unsent_age_seconds", "Age of the oldest unsent outbox message"),
    "expired_leases": ("mediapipe_expired_leases", "Running tasks whose lease ran out (the reconciler's work)"),
    "oldest_running_seconds": ("mediapipe_oldest_running_task_age_seconds",
                               "Time since the oldest running task was claimed (0 when none runs)"),
    "unknown_tasks": ("mediapipe_unknown_tasks", "Tasks whose provider outcome is unknown"),
    "bulk_paused": ("mediapipe_bulk_paused", "1 while an operator has paused the bulk lane (bin/bulk), else 0"),
    "reconcile_age_seconds": ("mediapipe_last_reconcile_age_seconds", "Time since the last reconcile run finished"),
    "reconcile_duration_seconds": ("mediapipe_last_reconcile_duration_seconds", "Duration of the last reconcile run"),
}
SNAPSHOT_COUNTERS = {
    "retries": ("mediapipe_task_retries", "Automatic retries that spend an attempt (waits are counted apart)"),
    "manual_retries": ("mediapipe_manual_retries", "Failed tasks retried by an editor"),
    "duplicate_risk_accepted": ("mediapipe_duplicate_risk_retries",
                                "Unknown tasks retried with the risk of a duplicate charge accepted"),
}


class DatabaseCollector:
    """A prometheus_client collector over one `overview.gauges` reading."""

    def __init__(self, reading: dict) -> None:
        self.reading = reading

    def collect(self) -> Iterator[Metric]:
        tasks = GaugeMetricFamily("mediapipe_tasks", "Tasks that need a worker or a person, by status and kind",
                                  labels=["status", "kind"])
        counts = {(r["status"], r["kind"]): r["n"] for r in self.reading["tasks"]}
        for status in GAUGED_STATUSES:
            for kind in kinds.names():  # zeros too, so a series never vanishes when its last task moves on
                tasks.add_metric([status.value, kind], counts.get((status.value, kind), 0))
        yield tasks
        snapshot = self.reading["snapshot"]
        for key, (name, doc) in SNAPSHOT_GAUGES.items():
            if snapshot[key] is None and key.startswith("reconcile"):
                continue  # never ran: an absent series, so `absent()` alerts fire instead of a fake zero age
            yield GaugeMetricFamily(name, doc, value=float(snapshot[key] or 0))
        for key, (name, doc) in SNAPSHOT_COUNTERS.items():
            yield CounterMetricFamily(name, doc, value=float(snapshot[key] or 0))
        calls = CounterMetricFamily("mediapipe_provider_calls", "Provider calls in the ledger by outcome",
                                    labels=["provider", "outcome"])
        cost = CounterMetricFamily("mediapipe_provider_cost", "Estimated provider cost in the ledger by outcome",
                                   labels=["provider", "outcome"])
        for row in self.reading["calls"]:
            calls.add_metric([row["provider"], row["outcome"]], row["n"])
            cost.add_metric([row["provider"], row["outcome"]], row["cost"])
        yield calls
        yield cost
        waits = CounterMetricFamily("mediapipe_task_waits", "Waits that spend no attempt, by what the task waits for "
                                    "(busy: the provider or its rate; slot: a free call slot; input: another task "
                                    "making the same input; budget: a spend limit; storage: the store of media and "
                                    "receipts refusing writes, before a call or holding its paid result)",
                                    labels=["waiting_for"])
        seen = {row["waiting_for"]: row["n"] for row in self.reading["waits"]}
        for reason in ("busy", "slot", "input", "budget", "storage"):
            waits.add_metric([reason], seen.get(reason, 0))
        yield waits
        yield from latency_histograms(self.reading["latency"])
        yield from attention_gauges(self.reading)


def attention_gauges(reading: dict) -> Iterator[Metric]:
    """What needs a person's or the reconciler's attention: dead letters by reason, missed cron slots, the oldest
    waiting task per lane, and where Redis and PostgreSQL disagree about the queue (absent when Redis is away)."""
    dead = GaugeMetricFamily("mediapipe_dead_letters", "Failed tasks waiting for a person, by why they failed",
                             labels=["reason"])
    for row in reading["dead_letters"]:
        dead.add_metric([row["reason"]], row["n"])
    yield dead
    missed = GaugeMetricFamily("mediapipe_missed_slots", "Time slots of a periodic job (the cron reconcile run, "
                               "the hourly retention) that passed without a run: recorded in the last day, and "
                               "since its latest run", labels=["job"])
    for row in reading["missed_slots"]:
        missed.add_metric([row["job"]], row["missed"])
    yield missed
    waiting = GaugeMetricFamily("mediapipe_oldest_waiting_task_age_seconds", "Age of the oldest task that is due "
                                "and runnable but not yet claimed, by lane (0 when none waits)", labels=["lane"])
    ages = {row["lane"]: row["seconds"] for row in reading["waiting_by_lane"]}
    for lane in LANES:
        waiting.add_metric([lane], float(ages.get(lane) or 0))
    yield waiting
    if reading.get("queue") is not None:
        queue = GaugeMetricFamily("mediapipe_queue_disagreement", "Where Redis and PostgreSQL disagree: messages "
                                  "in Redis whose task needs no worker (redis_only), and tasks sent and waiting "
                                  "with no message in Redis (database_only)", labels=["side"])
        for side in ("redis_only", "database_only"):
            queue.add_metric([side], reading["queue"][side])
        yield queue
    if reading.get("eviction") is not None:
        evicting = GaugeMetricFamily("mediapipe_redis_may_evict", "1 when Redis's maxmemory-policy lets it drop keys "
                                     "under memory pressure (a dropped message is re-sent only after "
                                     "LOST_DISPATCH_SECONDS); 0 for noeviction", labels=["policy"])
        evicting.add_metric([reading["eviction"]], float(reading["eviction"] != "noeviction"))
        yield evicting


BUCKETS = ("0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "300", "600", "1800", "3600", "+Inf")
HISTOGRAMS = {   # counter name -> (metric, help, label)
    "latency_accepted_to_started": ("mediapipe_task_accepted_to_started_seconds",
                                    "From the save to a task's first claim by a worker", "kind"),
    "latency_run": ("mediapipe_task_run_seconds", "One attempt, from its claim to its end", "kind"),
    "latency_save_to_done": ("mediapipe_version_save_to_done_seconds",
                             "From the save to the last task (the bundle) done", "lane"),
}


def latency_histograms(rows: list[dict]) -> Iterator[Metric]:
    """Prometheus histograms from per-bucket rows: cumulative buckets, a count and a sum per label."""
    found: dict[tuple[str, str], dict[str, tuple[int, float]]] = {}
    for row in rows:
        found.setdefault((row["name"], row["label"]), {})[row["le"]] = (int(row["n"]), float(row["total"]))
    for name, (metric, doc, label) in HISTOGRAMS.items():
        family = HistogramMetricFamily(metric, doc, labels=[label])
        for (counter, value), buckets in sorted(found.items()):
            if counter != name:
                continue
            running, cumulative = 0, []
            for le in BUCKETS:
                running += buckets.get(le, (0, 0.0))[0]
                cumulative.append((le, running))
            family.add_metric([value], cumulative, sum(total for _, total in buckets.values()))
        yield family


def _may_scrape() -> None:
    token = settings().metrics_token
    if token:
        if not bearer_matches(token):
            raise Problem(401, "unauthorized", "send Authorization: Bearer <METRICS_TOKEN>",
                          headers={"WWW-Authenticate": 'Bearer realm="metrics"'})
    elif not direct_loopback():
        raise Problem(403, "forbidden", "without METRICS_TOKEN, /metrics answers only direct calls from this "
                                        "machine; set METRICS_TOKEN to scrape it from elsewhere")


@bp.get("/metrics")
def metrics() -> Response:
    _may_scrape()
    registry = CollectorRegistry(auto_describe=False)
    reading = overview.gauges(get_conn())
    client = get_redis()
    try:
        reading["queue"] = drift.queue_disagreement(get_conn(), client) if client is not None else None
        reading["eviction"] = servers.eviction_policy(client) if client is not None else None
    except redis.RedisError:
        reading["queue"] = reading["eviction"] = None   # Redis away: the gauges are absent rather than wrong
    registry.register(DatabaseCollector(reading))
    return Response(generate_latest(registry), content_type=CONTENT_TYPE_LATEST,
                    headers={"Cache-Control": "no-store"})
