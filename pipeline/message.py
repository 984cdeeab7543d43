"""An RQ message: the task ids it carries, an attempt of each run in turn (`run_task(*task_ids)`, the RQ job).

A message carries only task ids, usually one: several when its queue held a backlog (`lanes.tasks_per_message`), each
next one claimed in its predecessor's successful completion (`pipeline.attempt`, `Following`). A duplicate or early
message claims nothing and returns. The job's return value carries no business state.
"""

from __future__ import annotations

from rq import get_current_job

from pipeline import dispatch, pauses, runtime, tasks, tracing
from pipeline.attempt import Attempt, claim, run as run_attempt
from pipeline.core.errors import LeaseLost
from pipeline.log import log


class Message:
    """The tasks of one RQ message, run here in turn: each next one is claimed with the success before it.

    A message carries several tasks only when its queue held a backlog (`lanes.tasks_per_message`). The tasks it
    has not started yet go back to the queue, a message each, when the queue has run dry (so that idle workers
    share them) or this worker was asked to stop, and when a task's run raised (the job then fails as before)."""

    def __init__(self, rt: runtime.Runtime, task_ids: tuple[int, ...]) -> None:
        self.rt, self.task_ids = rt, task_ids
        self.job = get_current_job()
        self.job_id = self.job.id if self.job else None
        self.claimed: dict[int, Attempt | None] = {}   # claimed with the success before it (None: not runnable)
        self.handed_back = False
        self.at = 0   # the position of the task running now

    def _hand_back(self, rest: tuple[int, ...], *, only_if_idle: bool) -> bool:
        if self.job is None or not rest:
            return False
        self.handed_back = dispatch.hand_back(self.job.connection, self.job.origin, rest, self.job.id,
                                              only_if_idle=only_if_idle)
        return self.handed_back

    def next_task(self) -> int | None:
        """The task to claim with the running one's success: the next, unless the rest went back to the queue now."""
        i = self.at + 1
        if i == len(self.task_ids) or self._hand_back(self.task_ids[i:], only_if_idle=not self.rt.stopping()):
            return None
        return self.task_ids[i]

    def run(self) -> str:
        statuses = []
        for i, task_id in enumerate(self.task_ids):
            rest, self.at = self.task_ids[i:], i
            if self.handed_back or (i and task_id not in self.claimed
                                    and self._hand_back(rest, only_if_idle=not self.rt.stopping())):
                break
            try:
                statuses.append(_run_one(self, task_id))
            except BaseException:   # one claimed with this task's success is left to its lease's end
                if not self.handed_back:
                    self._hand_back(tuple(t for t in rest[1:] if t not in self.claimed), only_if_idle=False)
                raise
        return " ".join(statuses)


def run_task(*task_ids: int) -> str:
    """The RQ job: each task its message carries, in turn, one attempt each (`Message`); their statuses."""
    return Message(runtime.current(), task_ids).run()


def _run_one(message: Message, task_id: int) -> str:
    rt, job_id = message.rt, message.job_id
    attempt = message.claimed.pop(task_id) if task_id in message.claimed else claim(rt, task_id, job_id)
    if attempt is None:
        if pauses.hold_if_paused(rt.conn(), task_id):   # sent again when the lane resumes
            log("job_skipped", task_id=task_id, rq_job_id=job_id, reason="lane paused")
            return "held"
        failed = tasks.fail_past_deadline(rt.conn(), [task_id], actor=rt.worker_id, by="worker",
                                          last_error=tasks.DEADLINE_BEFORE_CLAIM)
        log("job_skipped", task_id=task_id, rq_job_id=job_id, reason="deadline passed" if failed else "not runnable")
        return "failed" if failed else "skipped"
    attempt.message = message
    task = attempt.task
    fields = {"task_id": task.id, "content_id": task.content_id, "version": task.version, "kind": task.kind,
              "attempt": task.attempts, "lease_token": task.lease_token, "rq_job_id": job_id}
    # the job's span continues the save's trace, whose traceparent the claim read: it begins with the claim
    with tracing.span(f"run_task {task.kind}", parent=attempt.traceparent, start_ns=attempt.claimed_ns[0],
                      attributes={"messaging.system": "rq", "messaging.message.id": job_id, "task.id": task.id,
                                  "task.kind": task.kind, "task.attempt": task.attempts}):
        tracing.finished("claim", *attempt.claimed_ns, attributes={"task.id": task.id})
        return _attempted(message, attempt, fields)


def _attempted(message: Message, attempt: Attempt, fields: dict) -> str:
    """The claimed attempt run, its outcome written, and the messages it made sent; its status."""
    rt = message.rt
    log("job_start", **fields)
    try:
        with attempt:
            status, unblocked = run_attempt(rt, attempt)
    except LeaseLost as exc:
        log("lease_lost_nothing_written", **fields, error=str(exc))
        return "lease_lost"
    finally:   # an outcome that did not commit leaves the slot and the ledger row to be written alone
        attempt.settle_alone()
    # the tasks this one unblocked, and those its freed call slot woke, go to their queues now
    dispatch.send_now(rt.conn(), rt.redis, unblocked + attempt.woken(),
                      claim_seconds=rt.settings.dispatch_claim_seconds)
    log("job_end", **fields, status=status)
    return status
