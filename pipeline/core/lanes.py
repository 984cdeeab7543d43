"""Lanes and worker pools: which RQ queue a message goes to, and how many workers listen.

Every save is `interactive` (an editor waits for it) unless its request says
`"priority": "bulk"` (an import). Each task kind (pipeline/core/kinds/) has one RQ queue per
lane: `image` and `image-bulk`, `tts` and `tts-bulk`, and so on. Each kind has two
worker pools: one listens to both queues, interactive first (RQ takes from the first
non-empty queue in the order given), so interactive work never waits behind queued
bulk work; the other listens to the interactive queue only, and the bulk lane may not
hold the provider's last `reserved_slots` call slots, so an editor's first call starts
at once even while an import keeps every other slot busy. An operator may pause the
bulk lane (pipeline/pauses.py).

Inside the bulk lane contents take turns: the dispatcher keeps at most
`bulk_depth(kind)` bulk messages waiting in each bulk queue and refills it one turn
per content, least recently served content first (`outbox_claim_bulk`).

An interactive message carries one task, unless its queue already holds a backlog: then up to
`MOST_PER_MESSAGE` tasks (`tasks_per_message`), so RQ's own cost per job is spread over them.
Pure: the functions read the settings and figures they are given and nothing else.
See docs/decisions.md, "Lanes".
"""

from __future__ import annotations

from typing import Any

from pipeline.core.errors import InvalidInput
from pipeline.core import kinds

INTERACTIVE, BULK = LANES = ("interactive", "bulk")
MOST_PER_MESSAGE = 8    # task ids one message may carry (a worker refuses a message with more)
WAITING_PER_WORKER = 4  # messages a queue keeps waiting for each of its workers when its messages carry several tasks


def queue_name(kind: str, lane: str = INTERACTIVE) -> str:
    """The RQ queue of one kind in one lane. The interactive queue keeps the kind's plain name."""
    if kind not in kinds.names() or lane not in LANES:
        raise ValueError(f"no queue for kind {kind!r} in lane {lane!r}")
    return kind if lane == INTERACTIVE else f"{kind}-bulk"


def save_lane(asked: str | None, blocks: int, *, bulk_from: int, may_insist: bool) -> tuple[str, str | None]:
    """The lane a save runs in, and why when it is not the one asked for (`asked`: the parsed `priority`, None
    when the save names none): a save of more than `bulk_from` blocks is an import, not an editor's page, so it
    goes to the bulk lane (where it cannot hold back editors' work) unless `may_insist` (an admin) asked for
    "interactive" in so many words."""
    lane = asked or INTERACTIVE
    if lane == BULK or blocks <= bulk_from or (asked == INTERACTIVE and may_insist):
        return lane, None
    return BULK, f"{blocks} blocks, over BULK_SAVE_BLOCKS={bulk_from}: a save this large runs in the bulk lane"


def worker_queues(kind: str) -> list[str]:
    """The queues a worker of this kind listens to, in priority order."""
    return [queue_name(kind, lane) for lane in LANES]


def all_queues() -> tuple[str, ...]:
    return tuple(queue_name(kind, lane) for lane in LANES for kind in kinds.names())


def parse_priority(value: Any) -> str:
    """The lane a save request's `priority` asks for: "interactive" (the default when absent) or "bulk"."""
    if not isinstance(value, str) or value not in LANES:
        raise InvalidInput(f"priority must be \"interactive\" (the default) or \"bulk\"; got {value!r}",
                           field="priority")
    return value


def workers(cfg: "Settings", kind: str) -> int:
    """Worker processes of one kind on one machine that listen to both lanes (the Procfile's `-n` of
    worker-<kind>, printed by bin/workers): <PREFIX>_WORKERS, or for a paid kind by default the provider's
    concurrency less the interactive pool, at least one, so the two pools together have one worker per call
    slot and none of them waits for a slot it could not take; for local work, the kind's own default."""
    found = kinds.get(kind)
    if cfg.kinds[kind].workers:
        return cfg.kinds[kind].workers
    if found.paid:
        return max(1, cfg.providers[kind].max_concurrency - interactive_workers(cfg, kind))
    return found.workers


def interactive_workers(cfg: "Settings", kind: str) -> int:
    """Worker processes of one kind on one machine that listen to the interactive queue only (the
    Procfile's worker-<kind>-interactive): by default one per reserved call slot, at least one."""
    found = kinds.get(kind)
    if cfg.kinds[kind].interactive_workers:
        return cfg.kinds[kind].interactive_workers
    if found.paid:
        return max(1, cfg.providers[kind].reserved_slots)
    return found.interactive_workers


def bulk_depth(cfg: "Settings", kind: str) -> int:
    """Bulk messages of one kind the dispatcher keeps waiting in RQ: enough that no worker idles
    between two refills, few enough that a content arriving later gets its turn soon."""
    if cfg.bulk_queue_depth:
        return cfg.bulk_queue_depth
    found = kinds.get(kind)
    return 2 * (cfg.providers[kind].max_concurrency if found.paid else workers(cfg, kind))


def bulk_depths(cfg: "Settings") -> dict[str, int]:
    return {kind: bulk_depth(cfg, kind) for kind in kinds.names()}


BATCH_WINDOW_SECONDS = 24 * 3600   # the Batch API's completion window ("24h", the only one it takes)


def deadline_seconds(cfg: "Settings", lane: str) -> float:
    """A version's total deadline: TASK_DEADLINE_SECONDS, but a bulk version whose images go through the Batch
    API may wait the whole completion window, with an hour more to read the results."""
    if lane == BULK and cfg.image_bulk_backend == "batch":
        return max(cfg.deadline_seconds, BATCH_WINDOW_SECONDS + 3600)
    return cfg.deadline_seconds


def admission_limit(cfg: "Settings", lane: str) -> int:
    """Pending tasks a save of this lane may bring the total to: bulk saves leave the last tenth of
    MAX_PENDING_TASKS to editors, so an import that fills the system never refuses an editor's save."""
    if lane == BULK:
        return max(1, cfg.max_pending_tasks - cfg.max_pending_tasks // 10)
    return cfg.max_pending_tasks


def tasks_per_message(lane: str, waiting: int, new: int, workers: int) -> int:
    """How many task ids each of `new` tasks' messages sent to a queue together may carry, the queue holding
    `waiting` messages and `workers` workers listening to it.

    As many (up to MOST_PER_MESSAGE) as leave the queue with at least WAITING_PER_WORKER messages for each of
    its workers once these are sent: a worker then takes a message with several tasks no sooner than it would
    have taken the same tasks one by one, and the workers still share the backlog in pieces. On a quiet queue
    that means one (an editor's lesson starts on every worker at once); once the queue holds that many
    messages, eight. Bulk messages carry one task: the bulk lane counts messages to let contents take turns. No
    worker listening: one (how many will come is not known)."""
    if lane != INTERACTIVE or workers < 1:
        return 1
    short = WAITING_PER_WORKER * workers - waiting   # messages the queue lacks for four a worker
    if short <= 0:
        return MOST_PER_MESSAGE
    return max(1, min(MOST_PER_MESSAGE, new // short))
