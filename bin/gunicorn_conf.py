"""gunicorn's settings for the Procfile's web line (`gunicorn -c bin/gunicorn_conf.py ...`).

The worker class is ours (bin/webworker.py): gunicorn's threaded worker, with every request gathered whole by the
worker's event loop before a thread runs it, so a client that sends slowly, or not at all, holds no thread and no
database connection. Four threads per process, one per connection of the process's database pool (web/db.py
`POOL_SIZE`): a thread only ever runs a request that is all there.

Its only hook is the start-up check (pipeline/servers.py `preflight`): a PostgreSQL that this system
cannot use (too old, a refused login, a pooler that refuses our startup options) stops gunicorn's
master with the reason and exit code 2 before it forks a worker. Servers that are merely not up yet
do not stop the web: it answers 503 until they are (/readyz says which).
"""

import sys

# gunicorn's control socket (gunicorn 24 and later) sits at one path per user ($XDG_RUNTIME_DIR or ~/.gunicorn), so
# every web process on a machine would share it, and stopping one removes it under the others. Nothing of ours uses
# it: processes are managed by signals (the Procfile's supervisor, bin/dev).
control_socket_disable = True

worker_class = "bin.webworker.WholeRequestWorker"
threads = 4   # web/db.py POOL_SIZE (tests/unit/test_webworker.py holds them together)


def on_starting(server) -> None:
    from pipeline import servers, settings
    from pipeline.core.errors import ConfigError
    try:
        cfg = settings.load()
        if cfg.database_url:
            servers.preflight(cfg, wait_seconds=0, redis_too=True,
                              say=lambda line: print(f"web: {line}", file=sys.stderr))
    except (ConfigError, servers.ServerUnusable) as exc:
        print(f"web: cannot start: {exc}", file=sys.stderr)
        sys.exit(2)
    except Exception as exc:   # not up yet: /readyz answers 503 until it is
        print(f"web: the servers are not reachable yet ({exc.__class__.__name__}); answering 503 until they are",
              file=sys.stderr)
