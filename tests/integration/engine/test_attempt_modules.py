"""How much of the house one media attempt touches: the modules of ours whose code runs while a worker does
one image task from its message to its written outcome, counted by tracing the calls (docs/architecture.md,
"An attempt"); and that nothing below the attempt calls back up into it, the RQ message (`pipeline.message`) being
the one module above it."""

import ast
import sys
from pathlib import Path

import pytest

from pipeline import dispatch, message, runtime, versions
from pipeline.db import connect
from testkit.helpers import EDITOR, draft, make_settings, task_rows

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

ROOT = Path(__file__).resolve().parents[3]
OURS = ("pipeline", "providers", "receipts")
# A ratchet (docs/decisions.md, "An attempt runs the code of sixteen modules"): a change that makes an attempt
# run more of our modules says why here.
# 19 since the kinds registry (the registry and the kind's own module say what the attempt does with its kind); 20
# since the RQ message is a module of its own (`pipeline.message`, split from `pipeline.attempt`: no code added);
# 19 since each kind's call plan is resolved once per process (`slots.CallPlan`): the attempt no longer asks the
# kinds registry (`pipeline.core.kinds`) on its way
MOST = 19


def modules_run_by(fn) -> set[str]:
    """The modules of ours (files under pipeline/, providers/, receipts/) with a function that ran during fn()."""
    seen: set[str] = set()

    def profile(frame, event, arg):  # noqa: ARG001
        if event == "call":
            path = frame.f_code.co_filename
            if path.startswith(str(ROOT)):
                rel = Path(path).relative_to(ROOT)
                if rel.parts[0] in OURS:
                    seen.add(str(rel.with_suffix("")).replace("/", "."))
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return seen


def test_one_media_attempt_runs_the_code_of_no_more_of_our_modules_than_today(database_url, redis_url, tmp_path):
    cfg = make_settings(database_url, redis_url, tmp_path / "media", LEASE_SECONDS="60", HEARTBEAT_SECONDS="15")
    rt = runtime.with_providers(cfg, worker_id="w")
    runtime.install(rt)
    try:
        with connect(database_url, autocommit=True) as conn:
            saved = versions.save(conn, draft(2), cfg, by=EDITOR)
            dispatch.send_now(conn, rt.redis, saved.outbox_ids, claim_seconds=cfg.dispatch_claim_seconds)
            first, second = [r["id"] for r in task_rows(database_url, saved.content_id) if r["kind"] == "image"]
            assert message.run_task(first) == "succeeded"   # connections, slot rows and prepared statements warm
            touched = modules_run_by(lambda: message.run_task(second))
            assert conn.execute("SELECT status FROM tasks WHERE id = %s", (second,)).fetchone()["status"] == "succeeded"
    finally:
        runtime.install(None)
    assert {"pipeline.message", "pipeline.attempt", "providers.local_image"} <= touched   # the trace saw the attempt
    assert len(touched) <= MOST, f"{len(touched)} modules: {sorted(touched)}"


def imported_modules(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def importers_of(module: str) -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for part in OURS for p in (ROOT / part).rglob("*.py")
                  if module in imported_modules(p))


def test_no_module_below_the_attempt_imports_it():
    # the RQ message, which runs an attempt of each task it carries, is above it; and nothing of ours imports that
    assert importers_of("pipeline.attempt") == ["pipeline/message.py"]
    assert importers_of("pipeline.message") == []
