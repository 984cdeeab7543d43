"""The bulk lane's images through the OpenAI Batch API (IMAGE_BULK_BACKEND=batch): enlisted, sent, polled, recorded.

A worker that claimed a bulk-lane image task and holds its input makes no call: it writes the
call's intent receipt and `enlist`s a line, in one transaction that hands the task's lease and
its input hold to the line (a new token, held until the task's deadline) with the line's booking
at the batch price. The task stays `running` until its line is settled. `Batcher.advance` does the
rest, one step per batch per run, each step resumable from what PostgreSQL records, so a batcher
killed anywhere starts again where it was:

* gather: waiting lines become a batch once IMAGE_BATCH_MAX_LINES of them wait, or the oldest has
  waited IMAGE_BATCH_GATHER_SECONDS (`gathered`); a line whose task moved on meanwhile is dropped;
* upload: the JSONL input file, named after the batch, unless a file of that name is already
  there (an upload whose answer was lost) (`uploaded`);
* create: `creating` is committed before the create is sent; from then on the provider's list is
  searched for the batch's name (its metadata) before any create, so a second batch is never made
  (`submitted`);
* poll: every IMAGE_BATCH_POLL_SECONDS until the batch ends; a batch none of whose tasks still wait
  for it (superseded, cancelled) is cancelled at the provider, and what it finished is still kept;
* record: the output and error files are read line by line, and each line is settled in its own
  transaction (the asset and its result receipt first, then the task's outcome, the ledger row and
  the booking's settlement to the reported usage); a settled line is skipped when a file is read
  again. Lines the batch never ran (expired, cancelled) go back to the queue without spending an
  attempt and their booking is given back; a batch that failed validation sends every line back
  with its reason (`done`).

Both the batcher (bin/batches) and the reconciler run `advance`, one at a time (a session lock).
One line per distinct input across every unsettled line (a unique index): the one-call-per-input
rule holds for batch lines as for synchronous calls. See docs/providers.md, "The batch lane".
"""

from __future__ import annotations

import json
import tempfile
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db, spend, storage, tasks
from pipeline.core import prices
from pipeline.core.errors import Busy, LeaseLost, ProviderError, Refused, StorageUnavailable, Transient
from pipeline.core.records import Task
from pipeline.executor import keep_result
from pipeline.log import log
from pipeline.settings import Settings
from providers.errors import Ambiguous
from providers.http_classify import HttpStatus, classify
from providers.http_endpoint import Answer
from providers.openai_batch import FINISHED, BatchClient, request_line, result_lines
from providers.openai_http import _parse_image, image_payload
from receipts.calls import Intent, ReceiptBook, now
from receipts.media import MediaStore

ACTOR = "batcher"
PROVIDER = "openai-image"   # the ledger's name of the image provider whose Batch API this is


def enlist(conn: psycopg.Connection, cfg: Settings, book: ReceiptBook, task: Task,
           booking: spend.Booking | None) -> bool:
    """Hand a claimed bulk image task's call to the batch lane: the intent receipt (durable), then the line,
    the lease and the input hold in one transaction; the line owns the call's `booking` from then on. False
    (nothing enlisted, the booking given back) when the worker's lease is gone."""
    data, key = task.input, task.idempotency_key
    body = image_payload(data["model"], data["prompt"], data["size"], data.get("options") or {})
    token = uuid.uuid4()
    try:
        book.write_intent(Intent(task.id, task.attempts, str(token), PROVIDER, data["model"], task.fingerprint, key,
                                 now()))
    except OSError as exc:   # no receipt, so no line: the task waits for the store, spending no attempt
        wait = storage.REFUSALS.refused(cfg, "intent receipt", exc)
        raise StorageUnavailable(f"could not write the intent receipt, so the line was not enlisted: {exc}",
                                 retry_after=wait) from exc
    with conn.transaction():
        row = db.one(conn, "batch_lines_enlist", {
            "task_id": task.id, "lease_token": task.lease_token, "line_token": token, "custom_id": key,
            "body": Jsonb(body), "model": data["model"], "estimate": booking.cost if booking else 0.0,
            "list_cost": prices.estimate(cfg.providers["image"], "image", data), "booked_provider": booking.provider if booking else None,
            "booked_day": booking.day if booking else None})
        if row is None and booking is not None:
            spend.refund_in(conn, booking)
    return row is not None


@dataclass
class LineSettlement:
    """What settling one line writes with the task's outcome: the line's outcome, its ledger
    row and its booking's settlement (to the reported figure) or refund, and the input hold's release, which
    wakes the tasks waiting for the input."""

    line: dict
    outcome: str
    ledger_row: dict | None = None
    reported: float | None = None
    releases_input: bool = True   # False: the line's call may have been paid and its result is unknown
    def write(self, conn: psycopg.Connection) -> None:
        line = self.line
        booking = None if line["booked_provider"] is None else spend.Booking(
            line["booked_provider"], line["booked_day"], float(line["estimate"]), line["content_id"])
        if self.ledger_row is not None:
            spend.record_call(conn, _task(line), **self.ledger_row)
        if booking is not None:
            if self.outcome == "succeeded":
                if self.reported is not None:
                    spend.settle(conn, booking, self.reported)
            else:
                spend.refund_in(conn, booking)
        db.execute(conn, "batch_lines_settle", {"id": line["id"], "outcome": self.outcome})
        if not self.releases_input:   # as for a synchronous call: an unknown outcome keeps its input, so a task with
            return                    # the same input waits instead of paying for it a second time
        db.execute(conn, "input_calls_release", {"fingerprint": line["fingerprint"],
                                                 "lease_token": line["lease_token"]})


def _task(line: dict) -> Task:
    """The task of a line, as the holder of the line's lease sees it."""
    return Task.from_row({**line, "id": line["task_id"], "attempts": line["attempt"],
                          "lease_token": line["lease_token"]})


@dataclass
class Batcher:
    cfg: Settings
    conn: psycopg.Connection          # autocommit
    client: BatchClient
    store: MediaStore
    book: ReceiptBook
    clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)

    def advance(self) -> dict:
        """One round: gather what waits, then one step of every live batch that is due; what it did."""
        done = {"gathered": self.gather()}
        for batch in db.all(self.conn, "image_batches_due"):
            step = getattr(self, f"_{batch['status']}")
            try:
                step(batch)
            except ProviderError as exc:   # nothing recorded for this step: the next round does it again
                log("batch_step_failed", batch=batch["id"], status=batch["status"], error=exc.__class__.__name__,
                    message=str(exc)[:300])
                db.execute(self.conn, "image_batches_later", {"id": batch["id"],
                                                              "seconds": self.cfg.image_batch_poll_seconds})
            done[batch["status"]] = done.get(batch["status"], 0) + 1
        return done

    # gather ----------------------------------------------------------------------------------------

    def gather(self) -> int:
        """Drop waiting lines whose task moved on; put the rest into a batch when it is time. Lines gathered."""
        for line in db.all(self.conn, "batch_lines_orphaned"):
            self._settle_alone(LineSettlement(line, "cancelled"))
        with self.conn.transaction():
            waiting = db.all(self.conn, "batch_lines_waiting", {"max": self.cfg.image_batch_max_lines})
            if not waiting:
                return 0
            oldest = (self.clock() - waiting[0]["enlisted_at"]).total_seconds()
            if len(waiting) < self.cfg.image_batch_max_lines and oldest < self.cfg.image_batch_gather_seconds:
                return 0
            batch = db.one(self.conn, "image_batches_insert", {"name": uuid.uuid4(), "lines": len(waiting)})
            db.execute(self.conn, "batch_lines_gather", {"batch_id": batch["id"], "ids": [w["id"] for w in waiting]})
        log("batch_gathered", batch=batch["id"], name=str(batch["name"]), lines=len(waiting))
        return len(waiting)

    # the steps, by the batch's status ----------------------------------------------------------------

    def _gathered(self, batch: dict) -> None:
        """Upload the input file (or find the one a lost answer left), and record it."""
        name = f"mediapipe-{batch['name']}.jsonl"
        found = self.client.find_file(name)
        if found is None:
            with tempfile.TemporaryFile() as jsonl:
                for line in db.iter_rows(self.conn, "batch_lines_of_batch", {"batch_id": batch["id"]}):
                    jsonl.write(request_line(line["custom_id"], line["body"]))
                jsonl.seek(0)
                found = self.client.upload(name, jsonl)
        db.execute(self.conn, "image_batches_uploaded", {"id": batch["id"], "file_id": found["id"]})

    def _uploaded(self, batch: dict) -> None:
        db.execute(self.conn, "image_batches_creating", {"id": batch["id"]})   # from now on, look before creating
        self._creating({**batch, "status": "creating"})

    def _creating(self, batch: dict) -> None:
        """Create the batch, unless one of its name exists (a create whose answer was lost): never two."""
        remote = self.client.find(str(batch["name"])) or self.client.create(batch["input_file_id"],
                                                                           str(batch["name"]))
        db.execute(self.conn, "image_batches_submitted", {"id": batch["id"], "provider_batch_id": remote["id"],
                                                          "provider_status": remote.get("status"),
                                                          "seconds": self.cfg.image_batch_poll_seconds})
        log("batch_submitted", batch=batch["id"], provider_batch_id=remote["id"])

    def _submitted(self, batch: dict) -> None:
        remote = self.client.get(batch["provider_batch_id"])
        if remote.get("status") in FINISHED:
            self._record(batch, remote)
            return
        if remote.get("status") not in ("cancelling",) and db.scalar(
                self.conn, "batch_lines_still_wanted", {"batch_id": batch["id"]}) == 0:
            remote = self.client.cancel(batch["provider_batch_id"])
            db.execute(self.conn, "image_batches_cancelling", {"id": batch["id"]})
            log("batch_cancelled", batch=batch["id"], provider_batch_id=batch["provider_batch_id"])
        db.execute(self.conn, "image_batches_polled", {"id": batch["id"], "provider_status": remote.get("status"),
                                                       "seconds": self.cfg.image_batch_poll_seconds})

    _cancelling = _submitted

    # record ---------------------------------------------------------------------------------------------

    def _record(self, batch: dict, remote: dict) -> None:
        """Settle every line of a finished batch from its output and error files, then the lines it never ran."""
        lines = {line["custom_id"]: line for line in db.all(self.conn, "batch_lines_open_of_batch",
                                                            {"batch_id": batch["id"]})}
        for file_id in (remote.get("output_file_id"), remote.get("error_file_id")):
            if file_id and lines:
                self._record_file(batch, file_id, lines)
        status = remote.get("status")
        why = _unfinished_reason(remote)
        for line in list(lines.values()):
            error = (Busy(f"the batch {status} before this line ran", retry_after=0.0) if status != "failed"
                     else Transient(why))
            self._settle_failure(line, error, "requeued", ledger_row=None)
        db.execute(self.conn, "image_batches_done", {"id": batch["id"], "provider_status": status,
                                                     "output_file_id": remote.get("output_file_id"),
                                                     "error_file_id": remote.get("error_file_id"),
                                                     "error": why if status == "failed" else None})
        log("batch_done", batch=batch["id"], provider_status=status)

    def _record_file(self, batch: dict, file_id: str, lines: dict) -> None:
        cap = self.cfg.providers["image"].max_bytes * max(1, batch["lines"]) + 1_000_000
        with tempfile.TemporaryFile() as content:
            self.client.download(file_id, content, cap)
            content.seek(0)
            for result in result_lines(content):
                line = lines.pop(result.custom_id, None)
                if line is not None:   # settled before (a file read again after a crash), or not ours
                    self._settle(batch, line, result)

    def _settle(self, batch: dict, line: dict, result) -> None:
        record = dict(provider=PROVIDER, model=line["model"], idempotency_key=line["custom_id"],
                      http_status=result.status_code, latency_ms=None, estimated_cost=float(line["estimate"]),
                      list_cost=float(line["list_cost"]), batch_id=batch["id"])
        if result.status_code == 200:
            try:
                answer = _parse_image(Answer({"x-request-id": result.request_id},
                                             json.dumps(result.body).encode()), line["model"])
            except ValueError as exc:   # a paid answer we cannot use: the task fails like a synchronous one would
                self._settle_failure(line, Ambiguous(f"the batch line's answer is unusable: {exc}"), "failed",
                                     dict(record, outcome="ambiguous", cost=float(line["estimate"])))
                return
            figure = prices.reported(self.cfg.providers["image"], "image", line["input"], answer.metadata, batch=True)
            asset = keep_result(self.store, self.book, line["task_id"], line["attempt"], line["lease_token"],
                                answer, 0)
            also = LineSettlement(line, "succeeded", dict(record, outcome="succeeded", reported_cost=figure,
                                                          usage=answer.metadata.get("usage"),
                                                          cost=float(line["estimate"]) if figure is None else figure),
                                  figure)
            with self.conn.pipeline(), self.conn.transaction():   # superseded or cancelled meanwhile: the paid
                tasks.succeed_in(self.conn, _task(line), asset, actor=ACTOR)   # asset and the line are kept
                also.write(self.conn)
            return
        error = _line_error(result)
        if isinstance(error, Busy):   # the batch never ran it (expired, cancelled): back to the queue, not charged
            self._settle_failure(line, error, "requeued", ledger_row=None)
            return
        outcome = "refused" if isinstance(error, Refused) else "failed"
        self._settle_failure(line, error, outcome, dict(record, outcome=error.ledger_outcome, cost=0.0))

    def _settle_failure(self, line: dict, error: Exception, outcome: str, ledger_row: dict | None) -> None:
        also = LineSettlement(line, outcome, ledger_row, releases_input=not isinstance(error, Ambiguous))
        try:
            with self.conn.pipeline(), self.conn.transaction():
                tasks.fail_attempt_in(self.conn, _task(line), error, self.cfg, actor=ACTOR, now=self.clock())
                also.write(self.conn)
        except LeaseLost:
            self._settle_alone(also)

    def _settle_alone(self, also: LineSettlement) -> None:
        """A line whose task moved on (superseded, cancelled): settle the line without touching the task."""
        with self.conn.transaction():
            also.write(self.conn)


NEVER_RAN = frozenset({"batch_expired", "batch_cancelled"})   # error-file codes of lines the batch did not run


def _line_error(result) -> ProviderError:
    """A line's error, classified as a synchronous answer would be; a batch's answer is final, so a 5xx line
    (Ambiguous for a synchronous call, which may have run) is sent again."""
    if result.status_code is not None:
        error = classify(HttpStatus(result.status_code, {}, json.dumps(result.body).encode()))
    else:
        code = (result.error or {}).get("code")
        message = (result.error or {}).get("message") or "the batch returned no answer for this line"
        if code in NEVER_RAN:
            return Busy(f"the batch did not run this line ({code}): {message}", retry_after=0.0)
        error = Transient(f"batch line error {code}: {message}")
    if isinstance(error, Ambiguous):
        return Transient(f"{error} (a batch line's failure is final: not charged, sent again)")
    return error


def _unfinished_reason(remote: dict) -> str:
    errors = ((remote.get("errors") or {}).get("data") or [])[:3]
    said = "; ".join(f"{e.get('code')}: {e.get('message')}" for e in errors if isinstance(e, dict))
    return f"the batch {remote.get('status')}" + (f" ({said})" if said else "")


def client_for(cfg: Settings) -> BatchClient:
    import requests

    from providers.http_endpoint import Limits

    p = cfg.providers["image"]
    return BatchClient(base_url=p.base_url, api_key=p.api_key, session=requests.Session(),
                       limits=Limits(p.connect_timeout, p.read_timeout, max(p.call_timeout, 300.0), p.max_bytes))
