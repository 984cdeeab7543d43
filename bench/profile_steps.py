"""Where a worker's wall time goes: a pyinstrument session folded into the steps of one task and into
the kind of work (PostgreSQL, Redis, fsync, RQ, our Python). Wall time, so waiting counts."""

from __future__ import annotations

# (file path suffix, function) -> step; the innermost frame on a stack that matches names the step
STEPS = [
    ("pipeline/attempt.py", "_claim_in", "claim (attempt_claim: claim, reuse, input, slot + rate)"),
    ("pipeline/tasks.py", "fail_past_deadline", "claim found nothing"),
    ("pipeline/tasks.py", "find_reusable", "reuse check (asset_inputs_find)"),
    ("pipeline/attempt.py", "look", "lease check (tasks_lease_look, a read)"),
    ("pipeline/attempt.py", "beat", "lease renewal (tasks_heartbeat)"),
    ("pipeline/slots.py", "take", "provider slot + rate limit"),
    ("receipts/calls.py", "write_intent", "intent receipt (durable write)"),
    ("bench/instant_worker.py", "generate", "provider call (instant)"),
    ("receipts/media.py", "put", "asset file (durable write)"),
    ("receipts/calls.py", "write_result", "result receipt (durable write)"),
    ("pipeline/attempt.py", "_succeed", "complete (attempt_succeed, with ledger row and slot release)"),
    ("pipeline/attempt.py", "_finish", "a failure's outcome (tasks.apply, with what the call owes)"),
    ("pipeline/dispatch.py", "send_now", "fast path for unblocked tasks"),
    ("pipeline/log.py", "log", "JSON log lines"),
    ("pipeline/bundle.py", "build", "bundle zip"),
    ("pipeline/attempt.py", "__enter__", "heartbeat watch/forget"),
    ("pipeline/attempt.py", "__exit__", "heartbeat watch/forget"),
    ("pipeline/attempt.py", "run_task", "run_task, rest"),
]
OUTSIDE = "RQ worker loop (dequeue, registries, job bookkeeping)"


def _kind(path: list[tuple[str, str]]) -> str:
    for file_path, function in reversed(path):
        if "psycopg" in file_path:
            return "PostgreSQL (psycopg calls, incl. waiting)"
        if "/redis/" in file_path:
            return "Redis (redis-py calls, incl. waiting)"
        if function in ("write_atomic", "fsync_dir", "make_dirs", "_fsync"):
            return "durable file writes (incl. fsync)"
        if "/rq/" in file_path:
            return "RQ code"
        if any(part in file_path for part in ("/pipeline/", "/receipts/", "/providers/", "/bench/")):
            return "our Python"
    return "interpreter / stdlib"


def _step(path: list[tuple[str, str]]) -> str:
    for file_path, function in reversed(path):
        for suffix, name, step in STEPS:
            if function == name and file_path.endswith(suffix):
                return step
    return OUTSIDE


def summarise(session) -> dict:
    """{"total": s, "kinds": {kind: s}, "steps": {step: s}} from a pyinstrument session."""
    root = session.root_frame(trim_stem=False)
    kinds: dict[str, float] = {}
    steps: dict[str, float] = {}
    if root is None:
        return {"total": 0.0, "kinds": kinds, "steps": steps}

    def walk(frame, path):
        here = path + [(frame.file_path or "", frame.function or "")]
        own = frame.time - sum(child.time for child in frame.children)
        if own > 0:
            kind, step = _kind(here), _step(here)
            kinds[kind] = kinds.get(kind, 0.0) + own
            steps[step] = steps.get(step, 0.0) + own
        for child in frame.children:
            walk(child, here)

    walk(root, [])
    return {"total": root.time, "kinds": kinds, "steps": steps}
