"""The reconciler: gather evidence, decide (pipeline.core.recovery), apply in short guarded transactions.

One run at a time (a session advisory lock); every step works in bounded batches,
so no transaction touches more than `batch` rows. A run is recorded with its counts.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.core import recovery
from pipeline.core.outcome import Outcome
from pipeline.core.records import Asset
from pipeline.core.fingerprint import idempotency_key
from pipeline.log import log
from pipeline.settings import Settings
from pipeline.core.states import TaskStatus
from providers.base import Found, NotFound, Provider
from receipts.calls import Outcome, ReceiptBook, now as receipt_now
from receipts.media import MediaStore


RETENTION_INTERVAL_SECONDS = 3600  # retention reads old history; once an hour is plenty for day-long periods


@dataclass
class Report:
    locked: bool = True
    counts: dict[str, int] = field(default_factory=dict)
    errors: int = 0

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
        self.store = MediaStore(self.cfg.media_dir)
        self.book = ReceiptBook(self.cfg.media_dir)

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
            log("lookup_failed", task_id=row["id"], error=exc.__class__.__name__)
            return recovery.NO_ANSWER, None
        if isinstance(answer, NotFound):
            return recovery.NOT_FOUND, None
        if not isinstance(answer, Found):
            return recovery.UNSUPPORTED, None
        result = answer.result
        sha = self.store.put(result.data)
        asset = Asset.from_result(sha, result)
        if row["attempts"] and row["lease_token"]:
            self.book.write_result(Outcome(row["id"], row["attempts"], str(row["lease_token"]),
                                           result.provider_request_id, sha, asset.size, asset.media_type,
                                           asset.width, asset.height, asset.duration_ms, 0, receipt_now()))
        return recovery.FOUND, asset

    def evidence(self, row: dict) -> recovery.Evidence:
        status = TaskStatus(row["status"])
        intent = bool(row["attempts"]) and self.book.intent(row["id"], row["attempts"]) is not None
        if status is TaskStatus.RUNNING and intent and row["lease_token"]:
            intent = self.book.intent(row["id"], row["attempts"]).lease_token == str(row["lease_token"])
        asset = self._asset_from_receipt(row) if status is TaskStatus.RUNNING else None
        lookup = None
        if asset is None and (status is TaskStatus.UNKNOWN or intent) and not row["cancel_requested"]:
            lookup, asset = self._lookup(row)
        return recovery.Evidence(row["id"], status, str(row["lease_token"]) if row["lease_token"] else None,
                                 row["attempts"], row["max_attempts"], row["deadline_at"],
                                 row["cancel_requested"], intent, asset, lookup)

    # apply -------------------------------------------------------------------------------------

    def apply(self, action: Outcome, ev: recovery.Evidence) -> bool:
        if action.to is None:
            return False
        with self.conn.transaction():
            if action.asset:
                db.execute(self.conn, "assets_upsert", action.asset.__dict__)
            row = db.one(self.conn, "tasks_recover", {
                "task_id": ev.task_id, "from_status": ev.status.value, "lease_token": ev.lease_token,
                "to_status": action.to.value, "asset_sha256": action.asset.sha256 if action.asset else None,
                "available_at": action.available_at, "reason": action.reason, "event": action.event})
            if row is None:
                return False
            if action.asset:
                db.execute(self.conn, "asset_inputs_upsert", {"fingerprint": row["fingerprint"],
                                                              "sha256": action.asset.sha256})
                db.all(self.conn, "outbox_add_unblocked", {"task_id": row["id"]})
            if action.to is TaskStatus.RETRY:
                db.execute(self.conn, "outbox_add", {"task_id": row["id"], "lane": None,  # the version's lane
                                                     "available_at": action.available_at})
            if action.dead_letter:
                db.execute(self.conn, "dead_letters_insert", {"task_id": row["id"], "reason": action.dead_letter,
                                                              "last_error": action.reason,
                                                              "attempts": row["attempts"]})
        log("reconciled", task_id=ev.task_id, to=action.to.value, reason=action.reason, via=action.event)
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
            if self.apply(action, ev):
                report.add(f"{label}_{action.to.value}")
                return True
        except psycopg.OperationalError:
            raise
        except (psycopg.Error, OSError, ValueError) as exc:
            report.errors += 1
            log("reconcile_error", task_id=row["id"], error=f"{exc.__class__.__name__}: {exc}"[:300])
        return False

    def _bulk(self, query: str, params: dict, report: Report, label: str) -> None:
        while True:
            with self.conn.transaction():
                n = len(db.all(self.conn, query, {**params, "limit": self.batch}))
            report.add(label, n)
            if n < self.batch:
                return

    def retention(self, report: Report) -> None:
        """Unused old assets and old receipts; at most once per RETENTION_INTERVAL, since it reads history."""
        with self.conn.transaction():
            due = db.one(self.conn, "reconcile_mark_if_due", {"name": "retention",
                                                              "interval": RETENTION_INTERVAL_SECONDS})
        if due is None:
            return
        report.add("retention_runs")
        days = self.cfg.media_retention_days
        for row in db.all(self.conn, "reconcile_stale_assets", {"days": days, "limit": self.batch}):
            with self.conn.transaction():
                gone = db.one(self.conn, "reconcile_delete_asset", {"sha256": row["sha256"]})
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

    def run(self) -> Report:
        report = Report()
        if not db.one(self.conn, "reconcile_try_lock")["locked"]:
            return Report(locked=False)
        try:
            run_id = db.scalar(self.conn, "reconcile_runs_start")
            self._bulk("reconcile_supersede_old", {}, report, "superseded")
            self._decide_and_apply("reconcile_expired_leases", recovery.decide_expired, report, "expired", pages=50)
            self._decide_and_apply("reconcile_unknown", recovery.decide_unknown, report, "unknown", pages=1)
            self._bulk("reconcile_fail_past_deadline", {}, report, "deadline_failed")
            self._bulk("reconcile_outbox_unblocked", {}, report, "unblocked")
            self._bulk("reconcile_redispatch", {"threshold": self.cfg.lost_dispatch_seconds}, report, "redispatched")
            self.retention(report)
            db.execute(self.conn, "reconcile_runs_finish", {"run_id": run_id, "counts": Jsonb(report.counts),
                                                            "errors": report.errors})
        finally:
            if not self.conn.broken:
                db.execute(self.conn, "reconcile_unlock")
        return report
