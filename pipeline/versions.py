"""Saving content: one short transaction that admits, snapshots, plans tasks, queues
the runnable ones and supersedes older versions' unfinished work. Also cancel.

Nothing is written when a save is refused (stale base, capacity, a key's own limits, bad input).
Admission is exact and saves do not queue behind each other: the server takes the admission locks,
counts and refuses in one call sent right before the COMMIT (an asynchronous one), so the locks are held
while the server runs the two, not across a round trip to the client; the save is then made durable
(`admission_flush`, in the same round trip) before anyone is told it was accepted (docs/decisions.md).
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import datetime, timedelta, timezone
from dataclasses import dataclass, replace

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db, dispatch, keyspend, tasks, tracing
from pipeline.core import kinds, lanes
from pipeline.core.board import FINISHED, version_status
from pipeline.core.content import (Draft, carry_regenerations, check_narratable, check_speakable,
                                   plan_tasks, stamped)
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound
from pipeline.core.principal import Principal
from pipeline.settings import Settings
from providers import openai_models
from providers.registry import SPEECH_LOCALES


@dataclass(frozen=True)
class Saved:
    content_id: int
    version: int
    created: bool                       # False: an earlier save with the same key answered
    # the rows the caller sends at once (the fast path; claimed by the save itself with send_at_once); none
    # for a bulk save, whose rows the dispatcher releases as contents take turns
    outbox_ids: tuple[int, ...] | dispatch.ClaimedMessages = ()
    superseded: int = 0
    lane: str = lanes.INTERACTIVE


def plan_setup(cfg: Settings) -> dict[str, dict]:
    """What each kind that is on takes from the settings into its input (pipeline.core.content.plan_tasks): a paid
    kind its provider's name, model, size, voice and the options set; a local kind its own options."""
    setup = {}
    for kind in kinds.every():
        if not cfg.on(kind.name):
            continue
        if kind.paid:
            p = cfg.providers[kind.name]
            setup[kind.name] = {"provider": p.backend, "model": p.model, "size": p.size, "voice": p.voice,
                                "options": p.options}
        else:
            setup[kind.name] = dict(cfg.kinds[kind.name].options)
    return setup


def _earlier_save(conn: psycopg.Connection, save_key: str | None, request_digest: str,
                 key_id: int | None) -> Saved | None:
    """The save this API key made earlier with this Idempotency-Key (keys are scoped by the API key)."""
    if not save_key:
        return None
    row = db.one(conn, "versions_by_save_key", {"save_key": save_key, "key_id": key_id})
    if row is None:
        return None
    if row["save_digest"] != request_digest:
        raise Conflict(f"Idempotency-Key {save_key!r} was used for a different request; use a new key",
                       code="idempotency_key_reused")
    return Saved(row["content_id"], row["version"], created=False, lane=row["lane"])


def _retry_after(conn: psycopg.Connection, excess: int) -> int:
    done_per_minute = db.scalar(conn, "admission_recent_rate") or 0
    return max(1, min(600, math.ceil(excess * 60 / max(done_per_minute, 1))))


def speakable(cfg: Settings) -> tuple[str, ...]:
    """The languages (locale prefixes) the configured speech provider speaks; () when it reads any."""
    return SPEECH_LOCALES.get(cfg.providers["tts"].backend, ())


def save(conn: psycopg.Connection, draft: Draft, cfg: Settings, *, by: Principal, content_id: int | None = None,
         base_version: int | None = None, save_key: str | None = None, lane: str = lanes.INTERACTIVE,
         send_at_once: bool = False) -> Saved:
    """`_save` in a span of the trace the version carries on (its traceparent is this span's; docs/tracing.md)."""
    with tracing.span("save", attributes={"content.id": content_id, "content.team": by.team,
                                          "blocks": len(draft.blocks)}):
        return _save(conn, draft, cfg, by=by, content_id=content_id, base_version=base_version,
                     save_key=save_key, lane=lane, send_at_once=send_at_once)


def _save(conn: psycopg.Connection, draft: Draft, cfg: Settings, *, by: Principal, content_id: int | None,
          base_version: int | None, save_key: str | None, lane: str, send_at_once: bool) -> Saved:
    """Create a content item of `by`'s team (content_id None) or its next version on top of `base_version` (the
    content keeps its team; who may save it is checked before, pipeline/teams.py).

    `by`: who saves; its owner is recorded, and its key's own limits apply (KeyLimitReached; none without a key,
    and the demo door's key is 0).
    `lane`: "interactive" (an editor waits) or "bulk" (an import); see pipeline/core/lanes.py.
    `send_at_once`: the caller sends the runnable tasks' messages right after this returns
    (dispatch.send_now), so the save claims them as it writes them (`Saved.outbox_ids` is then a
    dispatch.ClaimedMessages); without a send they wait for the dispatcher until the claim runs out.
    Inside a caller's transaction the save commits with it, at the usual durability.
    """
    lane = lanes.parse_priority(lane)
    check_speakable(draft.locale, speakable(cfg))
    tts = cfg.providers["tts"]
    speech = openai_models.speech_model(tts.model) if tts.backend == "openai" else None
    if speech is not None:
        check_narratable(draft, lambda text: openai_models.speech_limit_refusal(speech, text))
    request_digest = draft.digest if content_id is None else f"{content_id}:{base_version}:{draft.digest}"
    if lane != lanes.INTERACTIVE:   # the lane is part of the request an Idempotency-Key stands for
        request_digest += f"|lane={lane}"
    if content_id is not None and base_version is not None:   # regenerated media stay regenerated
        base = db.one(conn, "versions_get", {"content_id": content_id, "version": base_version})
        draft = carry_regenerations(draft, base["blocks"]) if base else draft
    plan = plan_tasks(draft, plan_setup(cfg))
    if len(plan) > lanes.admission_limit(cfg, lane):
        raise InvalidInput(f"this content needs {len(plan)} tasks but at most {lanes.admission_limit(cfg, lane)} "
                           f"can be pending{' for a bulk save' if lane == lanes.BULK else ''} (MAX_PENDING_TASKS); "
                           "split it", field="blocks")
    if by.key_id is not None and len(plan) > cfg.key_max_pending_tasks:
        raise InvalidInput(f"this content needs {len(plan)} tasks but one key may hold at most "
                           f"{cfg.key_max_pending_tasks} pending (KEY_MAX_PENDING_TASKS); split it", field="blocks")
    own = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE   # not inside a caller's transaction
    claim = uuid.uuid4() if send_at_once and lane == lanes.INTERACTIVE else None
    try:
        # One pipeline: the end of the save, the admission call, the COMMIT and the flush after it travel in one
        # round trip, so the admission locks are not held across a round trip to us (admit).
        with conn.pipeline():
            with conn.transaction():
                saved = _earlier_save(conn, save_key, request_digest, by.key_id)
                queued = None
                if saved is None:
                    saved, queued = _save_new(conn, draft, cfg, plan, by, content_id, base_version, save_key,
                                              request_digest, lane, claim, flush_later=own)
            if own:
                # it committed without waiting for its WAL flush (admit): make this save, or the earlier one we
                # answer with, durable before the caller may answer 202
                flush(conn)
    except psycopg.errors.UniqueViolation:
        # a concurrent save with the same key won the race: answer with its result
        with conn.transaction():
            saved = _earlier_save(conn, save_key, request_digest, by.key_id)
        if saved is None:
            raise
        if own:
            flush(conn)
        return saved
    except psycopg.Error as exc:
        raise _refusal(conn, exc, cfg, len(plan), lane) from None
    if queued is not None and lane == lanes.INTERACTIVE:
        rows = tuple(queued.fetchall())
        sent = dispatch.ClaimedMessages(claim, rows) if claim else tuple(row["id"] for row in rows)
        saved = replace(saved, outbox_ids=sent)
    return saved


def flush(conn: psycopg.Connection) -> None:
    """Make every commit so far durable: PostgreSQL 17 flushes on request; 15 and 16 by a synchronous commit."""
    if conn.info.server_version >= 170000:
        db.execute(conn, "admission_flush")
    else:
        db.execute(conn, "admission_flush_by_commit")


def _save_new(conn, draft, cfg, plan, by: Principal, content_id, base_version, save_key, request_digest,
              lane=lanes.INTERACTIVE, claim: uuid.UUID | None = None, *,
              flush_later: bool = True) -> tuple[Saved, psycopg.Cursor]:
    """Write the version; its last statements and the admission are only queued (the caller's pipeline sends
    them with the COMMIT). Returns the version and its outbox rows, to read after the COMMIT."""
    version = db.one(conn, "versions_insert", {
        "content_id": content_id, "base_version": base_version, "title": draft.title, "locale": draft.locale,
        "theme": draft.theme, "blocks": Jsonb([b.as_dict() for b in draft.blocks]), "digest": draft.digest,
        "saved_by": by.owner, "deadline_seconds": lanes.deadline_seconds(cfg, lane), "save_key": save_key,
        "save_digest": request_digest if save_key else None, "saved_by_key": by.key_id, "lane": lane,
        "team": by.team, "traceparent": tracing.traceparent()})
    if version is None:
        current = db.one(conn, "contents_get", {"content_id": content_id})
        if current is None:
            raise NotFound(f"content {content_id} does not exist")
        raise Conflict(f"base_version {base_version} is not the latest version ({current['current_version']}); "
                       "reload the content and apply your edit to the latest version",
                       code="stale_base_version", details={"current_version": current["current_version"]})
    content_id, number = version["content_id"], version["version"]
    superseded = [] if number == 1 else tasks.supersede_older(conn, content_id, number, actor=by.owner, by="save",
                                                              reason=f"superseded by version {number}")
    queued = _insert_tasks(conn, plan, content_id, number, version, cfg, claim)
    keyspend.book(conn, cfg, by.key_id, content_id=content_id, version=number)
    _admit(conn, cfg, len(plan), lane, by.key_id, flush_later=flush_later)
    return Saved(content_id, number, created=True, superseded=len(superseded), lane=lane), queued


def _insert_tasks(conn, plan, content_id: int, number: int, version: dict, cfg: Settings,
                  claim: uuid.UUID | None) -> psycopg.Cursor:
    """The version's tasks, their dependencies and the messages of those that depend on nothing, in one statement
    (queued: read the messages' rows after the COMMIT)."""
    plan = [stamped(task, content_id, number) for task in plan]
    deps = [(task.ref, dep) for task in plan for dep in task.depends_on]
    return db.execute(conn, "tasks_insert_version", {
        "content_id": content_id, "version": number, "max_attempts": cfg.max_attempts,
        "deadline_at": version["deadline_at"], "kinds": [task.kind for task in plan],
        "block_keys": [task.block_key for task in plan], "inputs": Jsonb([task.input for task in plan]),
        "fingerprints": [task.fingerprint for task in plan], "dep_refs": [d[0] for d in deps],
        "dep_on_refs": [d[1] for d in deps], "lane": version["lane"], "available_at": version["saved_at"],
        "claim_token": claim, "claim_seconds": cfg.dispatch_claim_seconds})


def admit(conn: psycopg.Connection, cfg: Settings, adding: int, lane: str, *, key_id: int | None = None,
          task_ids: list[int] | None = None) -> None:
    """Admission of `adding` tasks the calling transaction has added (a retry, a rerun): CapacityExceeded
    when the shared limit would be passed, KeyLimitReached when the key's daily spend would (booking what
    `task_ids` may cost), and the transaction must then roll back."""
    try:
        with conn.transaction():   # a savepoint, so that the refusal's Retry-After can still be read
            keyspend.book(conn, cfg, key_id, task_ids=task_ids)
            _admit(conn, cfg, adding, lane, None)
    except psycopg.Error as exc:
        raise _refusal(conn, exc, cfg, adding, lane) from None


def _admit(conn: psycopg.Connection, cfg: Settings, adding: int, lane: str, key_id: int | None, *,
           flush_later: bool = False) -> None:
    """Last in the transaction: the server takes the key's lock and the shared admission lock, counts and
    refuses (admit_save, schema/0010_admission.sql); the locks go with the COMMIT that follows.

    Admissions serialise on the lock, and each count runs after its lock is granted, so it sees every
    one committed before and this transaction's own tasks: the limit cannot be raced past. A bulk save
    stops short of the limit (lanes.admission_limit), keeping room for editors. `flush_later`: the commit
    does not wait for its WAL flush, so the locks go at once; the caller runs `admission_flush` after the
    commit, before acknowledging.
    """
    db.execute(conn, "admission_admit", {
        "adding": adding, "pending_limit": lanes.admission_limit(cfg, lane), "key_id": key_id,
        "key_pending_limit": cfg.key_max_pending_tasks, "key_saves_limit": cfg.key_saves_per_minute,
        "commit_async": flush_later})


REFUSALS = {"MPA01", "MPK01", "MPK02", "MPK03", "MPK04"}   # the SQLSTATEs admit_save and book_spend refuse with


def _refusal(conn: psycopg.Connection, exc: psycopg.Error, cfg: Settings, adding: int, lane: str) -> Exception:
    """The refusal an admit_save error stands for, with its Retry-After; any other error as it was.
    Called once the statements that failed were rolled back."""
    if exc.sqlstate not in REFUSALS:
        return exc
    found = json.loads(exc.diag.message_detail or "{}")
    if exc.sqlstate == "MPK01":
        return KeyLimitReached(f"this key made {cfg.key_saves_per_minute} saves in the last minute, its limit "
                               "(KEY_SAVES_PER_MINUTE)", retry_after=max(1, min(60, found.get("window_left") or 60)))
    if exc.sqlstate == "MPK03":
        return KeyLimitReached(f"this key's actions booked {found['booked']:g} of its {found['limit']:g} for today "
                               f"(KEY_DAILY_SPEND), and this one may cost {found['adding']:g} more; nothing was "
                               "changed", retry_after=_seconds_to_midnight())
    if exc.sqlstate == "MPK04":
        return KeyLimitReached(f"team {found['team']}'s actions booked {found['booked']:g} of its {found['limit']:g} "
                               f"for today (TEAM_DAILY_SPEND), and this one may cost {found['adding']:g} more; "
                               "nothing was changed", retry_after=_seconds_to_midnight())
    if exc.sqlstate == "MPK02":
        return KeyLimitReached(f"this key's saves hold {found['pending']} pending tasks with this one; its limit is "
                               f"{cfg.key_max_pending_tasks} (KEY_MAX_PENDING_TASKS)",
                               retry_after=_retry_after(conn, found["pending"] - cfg.key_max_pending_tasks))
    limit = lanes.admission_limit(cfg, lane)
    return CapacityExceeded(f"{found['pending'] - adding} tasks are pending and this adds {adding}; the limit is "
                            f"{limit}{' for bulk saves' if lane == lanes.BULK else ''}",
                            retry_after=_retry_after(conn, found["pending"] - limit))


def _seconds_to_midnight() -> int:
    now = datetime.now(timezone.utc)
    return max(1, int((now.replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1) - now)
                      .total_seconds()))


def cancel(conn: psycopg.Connection, content_id: int, version: int, *, by: Principal) -> int:
    """Record `by`'s cancel request; waiting tasks are cancelled now, running ones by their worker or lease expiry.

    Returns how many tasks were cancelled at once.
    """
    with conn.transaction():
        row = db.one(conn, "versions_get", {"content_id": content_id, "version": version})
        if row is None:
            raise NotFound(f"content {content_id} has no version {version}")
        state = version_status((t["kind"], t["status"]) for t in db.all(
            conn, "tasks_of_version_locked", {"content_id": content_id, "version": version}))
        if state in FINISHED:
            raise Conflict(f"version {version} is {state.replace('_', ' ')}: nothing is left to cancel, and nothing "
                           "was changed", code="nothing_to_cancel")
        db.execute(conn, "versions_request_cancel", {"content_id": content_id, "version": version,
                                                     "actor": by.owner})
        moved = tasks.cancel_waiting(conn, content_id, version, actor=by.owner)
    return len(moved)
