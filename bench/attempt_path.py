#!/usr/bin/env python3
"""The way one task's attempt takes through our modules: which it enters, and how often it goes back to one it
had already left.

A one-block lesson is saved on throw-away servers (embedded PostgreSQL and Valkey) with the local providers; its
image task's RQ job function (`pipeline.message.run_task`) runs once in this process, traced with
`sys.setprofile`. Every call and return that crosses from one of our modules (pipeline/, receipts/, providers/)
to another is a step; the path is the sequence of modules the steps land in. Printed: the modules entered, the
steps, and the calls back into a module already entered and left (not one still on the stack waiting for an
answer: the way going to and fro rather than down), then with --path the path itself. Run it before and after a change to the
attempt's shape.

    .venv/bin/python bench/attempt_path.py [--kind image|tts] [--path]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bin.embedded import Postgres, Valkey, free_port  # noqa: E402
from pipeline import dispatch, migrations, runtime, versions  # noqa: E402
from pipeline.db import connect  # noqa: E402
from testkit.helpers import EDITOR, draft, make_settings  # noqa: E402

OURS = tuple(str(ROOT / part) + "/" for part in ("pipeline", "receipts", "providers"))


def module_of(filename: str) -> str | None:
    if not filename.startswith(OURS):
        return None
    return str(Path(filename).relative_to(ROOT).with_suffix("")).replace("/", ".")


def trace(run) -> tuple[list[str], int]:
    """The modules of ours the frames of `run()` step into, in order (consecutive repeats folded), and how many
    calls went back into a module already entered and left (not one still waiting on the stack for an answer)."""
    path: list[str] = []
    stack: list[str | None] = []
    entered: set[str] = set()
    back = 0

    def step(module: str | None) -> None:
        if module is not None and (not path or path[-1] != module):
            path.append(module)

    def profile(frame, event, _arg):
        nonlocal back
        if event == "call":
            module = module_of(frame.f_code.co_filename)
            caller = next((m for m in reversed(stack) if m is not None), None)
            if module is not None and module != caller and module in entered and module not in stack:
                back += 1
            if module is not None:
                entered.add(module)
            stack.append(module)
            step(module)
        elif event == "return" and stack:
            stack.pop()
            step(next((m for m in reversed(stack) if m is not None), None))

    sys.setprofile(profile)
    try:
        run()
    finally:
        sys.setprofile(None)
    return path, back


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kind", default="image", choices=("image", "tts"))
    parser.add_argument("--path", action="store_true", help="print the whole path")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        base.chmod(0o755)
        pg, valkey = Postgres(base / "pg", free_port(), durable=False), Valkey(base / "valkey", free_port())
        pg.start()
        valkey.start()
        try:
            migrations.migrate(pg.url())
            cfg = make_settings(pg.url(), valkey.url(), base / "media")
            rt = runtime.with_providers(cfg, worker_id="path")
            runtime.install(rt)
            with connect(pg.url(), autocommit=True) as conn:
                saved = versions.save(conn, draft(1), cfg, by=EDITOR)
                task_id = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = %s",
                                       (saved.content_id, args.kind)).fetchone()["id"]
                dispatch.send_due(conn, rt.redis)
            from pipeline.message import run_task
            run_task(task_id)   # once untraced: the imports and the first connections are not the attempt's way
            with connect(pg.url(), autocommit=True) as conn:
                again = versions.save(conn, draft(1, prefix="again"), cfg, by=EDITOR)
                task_id = conn.execute("SELECT id FROM tasks WHERE content_id = %s AND kind = %s",
                                       (again.content_id, args.kind)).fetchone()["id"]
            status: list[str] = []
            path, back = trace(lambda: status.append(run_task(task_id)))
            runtime.install(None)
        finally:
            valkey.stop()
            pg.stop(mode="immediate")
    print(f"one {args.kind} attempt ({status[0]}): {len(set(path))} modules entered, {len(path)} steps, "
          f"{back} calls back into a module already entered and left")
    print("modules:", ", ".join(sorted(set(path))))
    if args.path:
        print(" -> ".join(m.rsplit(".", 1)[-1] for m in path))
    return 0


if __name__ == "__main__":
    sys.exit(main())
