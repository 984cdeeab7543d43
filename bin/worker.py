"""The RQ worker class of the Procfile's pools: `rq worker-pool -w bin.worker.Worker -n N QUEUES...`.

The worker's entry point, beside the other commands. Each job it takes runs
`pipeline.message.run_task` (the execution path is described there). RQ's own command line
starts the processes; this class only changes what a worker does before its first job
(docs/decisions.md, "Worker pools"):

* It is RQ's `SimpleWorker`: the job runs in the worker process itself, so the kept
  PostgreSQL connections and provider sessions serve job after job (a forking worker opens
  them again in every work horse: about 4x the CPU per task, docs/performance.md, "Which worker class").
* The job's modules are imported here, at module level. `rq worker-pool` imports the worker
  class before it forks its workers, so they start with everything imported (and share those
  pages), instead of importing it all in their first job.
* A worker opens its connections when it starts (`warm_up`), so the first job of a fresh pool
  waits for no connection either. A database that cannot be reached yet is not fatal: the job
  connects (and retries) as before.
* A worker started while Redis is away waits for it (`wait_for_redis`) instead of exiting.
* Messages are JSON, and a message that names anything but `pipeline.message.run_task(*task_ids)` is refused
  without running (`refused`): whoever can write to Redis cannot run code on the workers. Nor can a message
  make a worker send HTTP requests: one that asks for RQ 3's webhooks is refused, and a refusal sends none.
* No RQ scheduler: due times live in the outbox (pipeline/dispatch.py), nothing is scheduled
  in RQ, and `rq worker-pool` would otherwise fork a scheduler process per pool.
* RQ's own bookkeeping of the worker in Redis (its heartbeat, its state, the `rq suspend` flag) is
  written and read at most once a second instead of several times per job (`SparseBookkeeping`).
"""

from __future__ import annotations

import time

import psycopg
import redis
from rq.exceptions import DeserializationError
from rq.worker import SimpleWorker

from PIL import Image

from pipeline import attempt, dispatch, message, runtime, tracing  # noqa: F401 - imported before the pool forks (see above)
from pipeline import executor  # noqa: F401 - the executor, likewise
from pipeline import webhook_delivery, webhooks
from pipeline.core.errors import ConfigError
from pipeline.core.lanes import MOST_PER_MESSAGE
from pipeline.log import log
from providers import local_image, openai_http  # noqa: F401 - adapters the registry imports when built

Image.preinit()   # the image formats, which the adapters load when they read their first answer


def warm_up() -> None:
    """Build this process's job runtime and open its connections now rather than in the first job."""
    rt = runtime.current()
    try:
        rt.conn()
        rt.conn("lease")
        rt.redis.ping()
    except (psycopg.OperationalError, redis.RedisError) as exc:
        log("warm_up_deferred", worker=rt.worker_id, error=f"{exc.__class__.__name__}: {exc}"[:300])


def refused(job, runs: str = dispatch.JOB_FUNC, most: int = MOST_PER_MESSAGE) -> str | None:
    """Why a message may not run, or None: it must be exactly ours, `runs` (`pipeline.message.run_task`, or the
    webhook pool's `pipeline.webhook_delivery.deliver`) with one to `most` integer ids, asking RQ for nothing else:
    no callback (RQ imports and calls the dotted path a job names), no webhook (RQ 3 sends it when the job ends),
    no dependency, no retry or repeat (RQ would enqueue the job again by itself)."""
    try:
        name, args, kwargs = job.func_name, job.args, job.kwargs
    except DeserializationError:
        return "its payload is not JSON (a pickle?); messages of ours are JSON"
    if job.webhooks:
        return "it asks for webhooks; messages of ours ask for none"
    callbacks = [kind for kind, named in (("success", job._success_callback_name),
                                          ("failure", job._failure_callback_name),
                                          ("stopped", job._stopped_callback_name)) if named]
    if callbacks:
        return f"it names {' and '.join(callbacks)} callbacks; messages of ours name none"
    if job._dependency_ids:
        return "it depends on other jobs; messages of ours depend on none (PostgreSQL keeps the order)"
    if job.retries_left or job.repeats_left:
        return "it asks RQ to run it again (retry or repeat); messages of ours never do (PostgreSQL decides)"
    if name != runs:
        return f"it names {str(name)[:100]!r}; these workers run only {runs}"
    if kwargs or not 1 <= len(args) <= most or any(isinstance(a, bool) or not isinstance(a, int) for a in args):
        return f"{runs} takes one to {most} integer ids"
    return None


class SparseBookkeeping:
    """RQ's bookkeeping of a worker in Redis, written and read at most once a second rather than around every job.

    Before `SimpleWorker` in a worker class's bases. Per no-op job RQ sends its worker heartbeat three times (two
    round trips each) for a key that lives minutes (worker_ttl + 60 s), writes the state `idle` twice and reads
    the `rq suspend` flag once: 12 of the job's 52 Redis commands and a third of its worker CPU
    (bench/rq_overhead.py). `rq info` still sees the worker, its state and its last heartbeat within a second.
    """

    bookkeeping_seconds = 1.0
    _beaten_at = _looked_at = float("-inf")

    def heartbeat(self, timeout=None, pipeline=None) -> None:
        """RQ's worker heartbeat, at most once a second; one written in RQ's own pipeline costs no round trip: kept."""
        if pipeline is None:
            if time.monotonic() - self._beaten_at < self.bookkeeping_seconds:
                return
            self._beaten_at = time.monotonic()
        super().heartbeat(timeout, pipeline)

    def set_state(self, state, pipeline=None) -> None:
        """The worker's state in Redis, written only when it changes (RQ writes `idle` twice between jobs)."""
        if pipeline is None and state == self.get_state():
            return
        super().set_state(state, pipeline)

    def check_for_suspension(self, burst: bool) -> None:
        """Whether `rq suspend` holds the workers, looked up at most once a second rather than before every job."""
        if time.monotonic() - self._looked_at >= self.bookkeeping_seconds:
            self._looked_at = time.monotonic()
            super().check_for_suspension(burst)


class Worker(SparseBookkeeping, SimpleWorker):
    """RQ's SimpleWorker, warmed up before its first job, without an RQ scheduler process, its bookkeeping sparse.

    After losing Redis it looks again at most every 5 s (RQ's default backs off to 60 s), so
    work resumes within seconds of Redis coming back; waiting costs nothing, PostgreSQL keeps it.
    """

    max_connection_wait_time = 5.0
    job_class = dispatch.MessageJob
    runs, most = dispatch.JOB_FUNC, MOST_PER_MESSAGE   # the one function its messages may name, with 1..most ids

    def __init__(self, *args, **kwargs) -> None:
        kwargs["serializer"] = dispatch.SERIALIZER   # whatever the command line says: never unpickle a message
        kwargs["job_class"] = dispatch.MessageJob    # nor call a callback a message names
        super().__init__(*args, **kwargs)
        for queue in self.queues:   # registry clean-ups read abandoned jobs with their queue's class: ours too
            queue.job_class = dispatch.MessageJob

    def execute_job(self, job, queue):
        """Run a message only if it names our job function with one task id; refuse anything else unrun.

        Whoever can write to Redis can plant a message. A pickle does not even load (the JSON serializer
        above cannot read it, so no code in it runs), and a JSON message naming any other function (RQ would
        import and call any dotted path) is refused: it goes to RQ's failed registry, and PostgreSQL, which
        decides all work, is not touched."""
        refusal = refused(job, self.runs, self.most)
        if refusal:
            log("job_refused", job_id=job.id, queue=queue.name, reason=refusal)
            job.webhooks = []   # RQ's failure handling would send the message's own "failed" webhooks,
            job.retries_left = job.repeats_left = None   # or enqueue it again for its retries
            self.handle_job_failure(job, queue=queue, exc_string=f"refused: {refusal}")
            # nor may RQ's clean-up of its intermediate queue fail it again a minute later, reading them anew
            queue.intermediate_queue.remove(job.id)
            return
        return super().execute_job(job, queue)

    def perform_job(self, job, queue, execution) -> bool:
        """Run the job under RQ's time limit, set here from this worker's attempt ceiling (times the tasks it carries).

        The dispatcher enqueues jobs without a limit; the attempt ceiling (the call is given up,
        the lease no longer renewed) is what ends an attempt. This limit is the backstop for a
        job stuck anywhere else: past it RQ interrupts the job, and the reconciler moves the task
        on from its evidence once the lease runs out. `execution` is RQ 3's record of this run of
        the job (SimpleWorker.execute_job makes it), passed on as it came.
        """
        if not job.timeout or job.timeout < 0:
            job.timeout = attempt.job_timeout(runtime.current().settings) * len(job.args)
        return super().perform_job(job, queue, execution)

    def work(self, *args, **kwargs) -> bool:
        kwargs["with_scheduler"] = False
        # after the pool's fork, as the SDK asks of forking servers: the span processor's export thread is this
        # process's own (docs/tracing.md); nothing is imported when tracing is off
        tracing.setup(runtime.current().settings.tracing, "mediapipe-worker")
        warm_up()
        runtime.current().stopping = lambda: self._stop_requested   # run_task then gives back what it has not begun
        self.wait_for_redis()
        try:
            return super().work(*args, **kwargs)
        finally:   # RQ's pool child ends with os._exit, which skips the SDK's atexit export
            tracing.shutdown()

    def wait_for_redis(self, sleep=time.sleep) -> None:
        """Until Redis answers: RQ's start-up registers the worker there and exits on a connection error, so a
        worker started while Redis is away (a restart during an outage) would die instead of waiting. Once
        registered, RQ's own loop rides out a lost Redis (max_connection_wait_time above)."""
        wait = 0.5
        while True:
            try:
                self.connection.ping()
                return
            except redis.ConnectionError as exc:
                log("worker_waiting_for_redis", worker=self.name, error=f"{exc.__class__.__name__}: {exc}"[:200])
                sleep(wait)
                wait = min(wait * 2, self.max_connection_wait_time)


class WebhookWorker(Worker):
    """The webhook pool's worker (the Procfile's worker-webhook, on the `webhook` queue alone): it runs only
    `pipeline.webhook_delivery.deliver(delivery_id)`, one attempt at one message, and refuses anything else, as
    the task workers refuse webhook messages. It builds no provider: it keeps one PostgreSQL connection."""

    runs, most = webhook_delivery.JOB_FUNC, 1

    def perform_job(self, job, queue, execution) -> bool:
        """RQ's time limit for the job: twice the attempt's timeout (the request's own watchdog ends it first),
        and 30 s more for the database."""
        if not job.timeout or job.timeout < 0:
            job.timeout = int(2 * webhook_delivery.current().cfg.webhooks.timeout_seconds + 30)
        return super(Worker, self).perform_job(job, queue, execution)

    def work(self, *args, **kwargs) -> bool:
        kwargs["with_scheduler"] = False
        sender = webhook_delivery.current()
        tracing.setup(sender.cfg.tracing, "mediapipe-webhook")
        try:
            webhooks.secret_key(sender.cfg)
        except ConfigError as exc:
            log("webhook_worker_refused", error=str(exc))
            raise SystemExit(2)
        try:
            sender.conn()
        except psycopg.OperationalError as exc:
            log("warm_up_deferred", worker=sender.worker, error=f"{exc.__class__.__name__}: {exc}"[:300])
        self.wait_for_redis()
        try:
            return super(Worker, self).work(*args, **kwargs)
        finally:
            tracing.shutdown()
