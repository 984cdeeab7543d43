"""The reconciler: gather evidence, decide (pipeline.core.recovery), apply (pipeline.tasks.apply).

One run at a time (a session advisory lock); every step works in bounded batches, so no
transaction touches more than `batch` rows (superseding goes a content at a time, as a save
does). Each decision is applied in its own short transaction by the same `apply` a worker
uses. A run is recorded with its counts. Periodic runs are keyed by job and time slot
(`reconcile_runs_one_per_slot`): a cron run (`run(slot_seconds=...)`) records its slot and the
slots missed before it, and a second run of the same slot, on any machine, does nothing; the
hourly retention is such a job too. Between runs the dispatcher does the two scans that bound
recovery time (`scan`); a run does them too, so cron alone still recovers everything.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import psycopg
from psycopg.types.json import Jsonb

from pipeline import batches, db, storage, tasks
from pipeline.core import recovery
from pipeline.core.recovery import slot_of
from pipeline.core.records import idempotency_key
from pipeline.core.outcome import Outcome
from pipeline.core.records import Asset
from pipeline.core.states import TaskStatus
from pipeline.executor import keep_result
from pipeline.slots import slots_of
from pipeline.log import log
from pipeline.settings import Settings
from providers.base import Found, NoRecord, Provider


ACTOR = "reconciler"   # its role in the transition table, and the actor its events name
RETENTION_INTERVAL_SECONDS = 3600  # retention reads old history; once an hour is plenty for day-long periods


@dataclass
class Report:
    locked: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    errors: int = 0
    slot: datetime | None = None        # a slot-keyed run's slot
    slot_taken: bool = False            # its slot already had a run: nothing was done
    missed_before: int = 0              # slots of this job that passed without a run before this one

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] = self.counts.get(name, 0) + n


@dataclass
class Reconciler:
    cfg: Settings
    conn: psycopg.Connection                       # autocommit
    providers: dict[str, Provider]
    batch: int = 500
    rng: random.Random = field(default_factory=random.Random)
    now: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    def __post_init__(self) -> None:
        self.store = storage.media_store(self.cfg)
        self.book = storage.receipt_book(self.cfg)
        self.store_id = self.book.store_id()

    # evidence -------------------------------------------------------------------------------

    def _asset_from_receipt(self, row: dict) -> Asset | None:
        result = self.book.result(row["id"], row["attempts"]) if row["attempts"] else None
        if result is None or result.lease_token != str(row["lease_token"]):
            return None
        if not self.store.has(result.sha256, verify=True):
            return None
        return Asset(result.sha256, result.media_type, result.size, result.width, result.height, result.duration_ms)

    def _lookup(self, row: dict) -> tuple[str, Asset | None]:
        provider = self.providers.get(row["kind"])
        if provider is None or not provider.supports_lookup:
            return recovery.UNSUPPORTED, None
        try:
            answer = provider.lookup(idempotency_key(row["fingerprint"], row["id"]))
        except Exception as exc:  # noqa: BLE001 - a lookup that fails answers nothing
            log("lookup_failed", task_id=row["id"], attempt=row["attempts"], lease_token=row["lease_token"],
                error=exc.__class__.__name__)
            return recovery.NO_ANSWER, None
        if isinstance(answer, NoRecord):
            return recovery.NOT_FOUND, None
        if not isinstance(answer, Found):
            return recovery.UNSUPPORTED, None
        if row["attempts"] and row["lease_token"]:
            return recovery.FOUND, keep_result(self.store, self.book, row["id"], row["attempts"], row["lease_token"],
                                               answer.result, 0)
        return recovery.FOUND, Asset.from_result(self.store.put(answer.result.data), answer.result)

    def evidence(self, row: dict) -> recovery.Evidence:
        status = TaskStatus(row["status"])
        intent = bool(row["attempts"]) and self.book.intent(row["id"], row["attempts"]) is not None
        if status is TaskStatus.RUNNING and intent and row["lease_token"]:
            intent = self.book.intent(row["id"], row["attempts"]).lease_token == str(row["lease_token"])
        # a missing receipt means "never written" only in the store the worker wrote to
        sees = row.get("receipt_store") == self.store_id
        asset = self._asset_from_receipt(row) if status is TaskStatus.RUNNING else None
        lookup = None
        if asset is None and (status is TaskStatus.UNKNOWN or intent or not sees) and not row["cancel_requested"]:
            lookup, asset = self._lookup(row)
        return recovery.Evidence(row["id"], status, str(row["lease_token"]) if row["lease_token"] else None,
                                 row["attempts"], row["max_attempts"], row["deadline_at"],
                                 row["cancel_requested"], intent, asset, lookup, sees)

    # apply -------------------------------------------------------------------------------------

    def apply(self, action: Outcome, row: dict) -> bool:
        """Apply a decision about a task row it read (tasks.apply, as a worker's); False when the task changed."""
        if action.to is None:
            return False
        with self.conn.transaction():
            applied = tasks.apply(self.conn, tasks.Seen.found(row), action, actor=ACTOR)
            if applied.status is not None and row["status"] == TaskStatus.RUNNING.value and row["lease_token"]:
                # the attempt whose lease ran out is over: the call slot its worker held is free now
                db.execute(self.conn, "provider_slots_release_of_attempt", {"lease_token": row["lease_token"]})
        if applied.status is None:
            return False
        log("reconciled", task_id=row["id"], attempt=row["attempts"], lease_token=row["lease_token"],
            to=action.to.value, reason=action.reason, via=action.event)
        return True

    def _decide_and_apply(self, query: str, decide, report: Report, label: str, pages: int) -> None:
        """Up to `pages` batches; each row is decided and applied in its own short transaction."""
        lookup_kinds = [kind for kind, p in self.providers.items() if p.supports_lookup]
        for _ in range(pages):
            rows = db.all(self.conn, query, {"limit": self.batch, "kinds": lookup_kinds})
            moved = sum(self._one(row, decide, report, label) for row in rows)
            if len(rows) < self.batch or not moved:
                return

    def _one(self, row: dict, decide, report: Report, label: str) -> bool:
        try:
            ev = self.evidence(row)
            action = decide(ev, self.now(), base=self.cfg.backoff_base_seconds, cap=self.cfg.backoff_cap_seconds,
                            rng=self.rng)
            if self.apply(action, row):
                report.add(f"{label}_{action.to.value}")
                return True
        except psycopg.OperationalError:
            raise
        except (psycopg.Error, OSError, ValueError) as exc:
            report.errors += 1
            log("reconcile_error", task_id=row["id"], attempt=row["attempts"], lease_token=row["lease_token"],
                error=f"{exc.__class__.__name__}: {exc}"[:300])
        return False

    def _bulk(self, query: str, params: dict, report: Report, label: str) -> None:
        while True:
            with self.conn.transaction():
                n = len(db.all(self.conn, query, {**params, "limit": self.batch}))
            report.add(label, n)
            if n < self.batch:
                return

    def advance_batches(self, report: Report) -> None:
        """One round of the batch lane (pipeline/batches.py), unless the batcher process is in one now."""
        if self.cfg.image_bulk_backend != "batch" and not db.scalar(self.conn, "image_batches_any_live"):
            return
        if self.cfg.providers["image"].backend != "openai":
            log("batches_left", reason="IMAGE_PROVIDER is not openai: live batch lines wait for it")
            return
        if not db.one(self.conn, "image_batches_try_lock")["locked"]:
            return
        try:
            batcher = batches.Batcher(self.cfg, self.conn, batches.client_for(self.cfg), self.store, self.book)
            for step, n in batcher.advance().items():
                report.add(f"batch_{step}", n)
        finally:
            if not self.conn.broken:
                db.execute(self.conn, "image_batches_unlock")

    def wake_slot_waiters(self, report: Report) -> None:
        """Tasks waiting for a call slot, as many as each provider's free slots allow: slots freed by the
        recovery of dead workers' attempts, by running out (`held_until`), or just before their waiters parked."""
        for kind, provider in self.providers.items():
            woken = db.all(self.conn, "provider_slots_wake", {
                "kind": kind, "provider": slots_of(provider.name, kind), "bulk_slots": self.cfg.providers[kind].bulk_slots})
            report.add("slot_waiters_woken", len(woken))

    def supersede_old(self, report: Report) -> None:
        """Unfinished work of versions older than their content's current one, as a save supersedes it."""
        while True:
            contents, moved = db.all(self.conn, "reconcile_contents_with_old_work", {"limit": self.batch}), 0
            for row in contents:
                with self.conn.transaction():
                    moved += len(tasks.supersede_older(self.conn, row["content_id"], row["current_version"],
                                                       actor=ACTOR, by=ACTOR, reason="a newer version exists"))
            report.add("superseded", moved)
            if len(contents) < self.batch or not moved:
                return

    def fail_past_deadline(self, report: Report) -> None:
        """Waiting tasks whose deadline passed fail with a dead letter, a batch per transaction."""
        while True:
            due = [row["id"] for row in db.all(self.conn, "reconcile_past_deadline", {"limit": self.batch})]
            failed = tasks.fail_past_deadline(self.conn, due, actor=ACTOR, by=ACTOR) if due else []
            report.add("deadline_failed", len(failed))
            if len(due) < self.batch or not failed:
                return

    def _start_slot(self, job: str, seconds: int) -> dict | None:
        """Record this job's run for its current slot; None when the slot already has one."""
        return db.one(self.conn, "reconcile_runs_start_slot", {"job": job, "slot": slot_of(self.now(), seconds),
                                                               "slot_seconds": seconds})

    def retention(self, report: Report) -> None:
        """Unused old assets and old receipts; once per hourly slot (any machine), since it reads history."""
        started = self._start_slot("retention", RETENTION_INTERVAL_SECONDS)
        if started is None:
            return
        report.add("retention_runs")
        done = Report()
        self._retain(done)
        report.counts.update(done.counts)
        db.execute(self.conn, "reconcile_runs_finish", {"run_id": started["id"], "counts": Jsonb(done.counts),
                                                        "errors": 0})

    def _retain(self, report: Report) -> None:
        """Delete assets nothing current uses, compact old receipts and delete settled webhook events (with their
        messages and attempts), past MEDIA_RETENTION_DAYS; fold the admission counters of database connections that
        have ended."""
        report.add("pending_counts_folded", len(db.all(self.conn, "admission_fold_counts")))
        days = self.cfg.media_retention_days
        while pruned := len(db.all(self.conn, "webhook_events_prune", {"days": days, "limit": self.batch})):
            report.add("webhook_events_deleted", pruned)
            if pruned < self.batch:
                break
        for row in db.all(self.conn, "assets_stale", {"days": days, "limit": self.batch}):
            with self.conn.transaction():
                gone = db.one(self.conn, "assets_delete", {"sha256": row["sha256"]})
            if gone:
                self.store.delete(row["sha256"])
                report.add("assets_deleted")
        after = 0
        while True:
            rows = db.all(self.conn, "reconcile_old_terminal_tasks", {"days": days, "after": after,
                                                                       "limit": self.batch})
            for row in rows:
                report.add("receipts_compacted", self.book.compact(row["id"]))
            if len(rows) < self.batch:
                return
            after = rows[-1]["id"]

    def scan(self) -> Report:
        """The two cheap scans between runs (the dispatcher's, every RECOVERY_SCAN_SECONDS): leases past
        `lease_until`, and messages sent LOST_DISPATCH_SECONDS ago and never claimed. Under the run's lock, so
        never beside a run; a page of expired leases at a time, so a provider lookup cannot hold up dispatch.
        Then, lock or no lock (the wake is safe beside anything), the waiters that free call slots allow."""
        report = Report(locked=db.one(self.conn, "reconcile_try_lock")["locked"])
        if report.locked:
            try:
                self._decide_and_apply("reconcile_expired_leases", recovery.decide_expired, report, "expired",
                                       pages=1)
                self._bulk("outbox_redispatch", {"threshold": self.cfg.lost_dispatch_seconds}, report,
                           "redispatched")
            finally:
                if not self.conn.broken:
                    db.execute(self.conn, "reconcile_unlock")
        self.wake_slot_waiters(report)   # after the leases' decisions, which free the slots they held
        return report

    def run(self, slot_seconds: int | None = None) -> Report:
        """One run; with `slot_seconds`, the run of the current slot (nothing when that slot already had one)."""
        report = Report()
        if not db.one(self.conn, "reconcile_try_lock")["locked"]:
            return Report(locked=False)
        try:
            if slot_seconds is None:
                run_id = db.scalar(self.conn, "reconcile_runs_start")
            else:
                started = self._start_slot("reconcile", slot_seconds)
                if started is None:
                    return Report(slot=slot_of(self.now(), slot_seconds), slot_taken=True)
                run_id, report.slot, report.missed_before = started["id"], started["slot"], started["missed_before"]
            self.supersede_old(report)
            self._decide_and_apply("reconcile_expired_leases", recovery.decide_expired, report, "expired", pages=50)
            self._decide_and_apply("reconcile_unknown", recovery.decide_unknown, report, "unknown", pages=1)
            self.wake_slot_waiters(report)
            self.advance_batches(report)
            self.fail_past_deadline(report)
            self._bulk("outbox_add_missing_unblocked", {}, report, "unblocked")
            self._bulk("outbox_redispatch", {"threshold": self.cfg.lost_dispatch_seconds}, report, "redispatched")
            self.retention(report)
            db.execute(self.conn, "reconcile_runs_finish", {"run_id": run_id, "counts": Jsonb(report.counts),
                                                            "errors": report.errors})
        finally:
            if not self.conn.broken:
                db.execute(self.conn, "reconcile_unlock")
        return report
