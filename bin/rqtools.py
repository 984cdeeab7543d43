"""RQ's own tools on our Redis, for operators: `bin/rq` (RQ's command line: `info`, `suspend`, `resume`, ...)
and `bin/rq-dashboard` (rq-dashboard's web page and its JSON).

Both take the Redis URL from our settings (REDIS_URL, with REDIS_CA_FILE for a rediss:// server's private CA,
as bin/rqconfig.py gives it to the worker pools) and hand it to the tool inside this process, so it is never on
a command line, where `ps` would show its password. They need nothing else: no DATABASE_URL and no PostgreSQL,
which `rq info -c bin.rqconfig` (the pools' start-up check) demands. Our messages are JSON
(pipeline.dispatch.SERIALIZER), so both read jobs with RQ's JSONSerializer. Runbook: docs/runbook.md ("RQ's own
tools").

Exit codes: the tool's own; 2 bad configuration (REDIS_URL not set or invalid, rq-dashboard not installed).
"""

from __future__ import annotations

import os
import sys

from rq import Worker

from bin import devenv
from pipeline import servers, settings as settings_mod
from pipeline.core.errors import ConfigError
from pipeline.dispatch import JOB_CLASS, SERIALIZER

SERIALIZER_PATH = f"{SERIALIZER.__module__}.{SERIALIZER.__qualname__}"
HELP = ("--help", "-h")


def _redis_url(tool: str) -> str | None:
    """The URL RQ's tools connect to, or None (said on stderr) when the settings give none."""
    try:
        cfg = settings_mod.load()
    except ConfigError as exc:
        print(f"{tool}: configuration error: {exc}", file=sys.stderr)
        return None
    if not cfg.redis_url:
        print(f"{tool}: {devenv.missing('REDIS_URL', os.environ)}", file=sys.stderr)
        return None
    return servers.rq_redis_url(cfg)


def rq_main(argv: list[str]) -> int:
    """RQ's command line (`bin/rq info`, `bin/rq suspend`, ...) with our Redis URL and serializer added after
    the command's name; `bin/rq --help` lists RQ's commands."""
    from rq.cli.cli import main as rq_cli

    command, rest = (argv[0], argv[1:]) if argv else (None, [])
    if command is None or command in HELP or any(a in HELP for a in rest):
        args = argv
    else:
        url = _redis_url("bin/rq")
        if url is None:
            return 2
        args = [command, "--url", url, "--serializer", SERIALIZER_PATH, "--job-class", JOB_CLASS, *rest]
    return _click(rq_cli, args, "bin/rq")


class JSONWorkers(Worker):
    """RQ's workers as rq-dashboard lists them, read with our serializer: rq-dashboard 0.9.0's `--json` reaches
    its queues and jobs but not `Worker.all()`, whose workers then read the job a busy worker runs as a pickle,
    and its /workers.json answers 500 whenever a worker is busy."""

    @classmethod
    def all(cls, connection=None, job_class=None, queue_class=None, queue=None, serializer=None):
        return super().all(connection, job_class, queue_class, queue, serializer or SERIALIZER)


def dashboard_main(argv: list[str]) -> int:
    """rq-dashboard with `--json`, on 127.0.0.1:9181 unless `--bind` / `--port` say otherwise (it has no sign-in
    of its own: reach it through an SSH tunnel), reading our Redis."""
    try:
        from rq_dashboard import cli, web
    except ImportError as exc:
        print(f"bin/rq-dashboard: rq-dashboard is not installed here ({exc}); it comes with requirements-dev.lock "
              "(bin/dev, bin/test), or install rq-dashboard==0.9.0 and six (docs/runbook.md)", file=sys.stderr)
        return 2
    args = ["--json", "--bind", "127.0.0.1"]
    if not any(a in HELP for a in argv):
        url = _redis_url("bin/rq-dashboard")
        if url is None:
            return 2
        args += ["--redis-url", url]
    web.Worker = JSONWorkers
    return _click(cli.run, [*args, *argv], "bin/rq-dashboard", auto_envvar_prefix="RQ_DASHBOARD")


def _click(command, args: list[str], prog_name: str, **extra) -> int:
    """Run a click command as its own script would, returning its exit code."""
    try:
        command.main(args=args, prog_name=prog_name, **extra)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0
