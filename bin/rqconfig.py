"""RQ's settings for the Procfile's worker pools: `rq worker-pool -c bin.rqconfig ...`.

RQ's command line reads this module (its `-c`) before it starts a worker, so the Redis URL comes from
our settings (REDIS_URL, with REDIS_CA_FILE for a rediss:// server's private CA) and never appears on a
command line, where `ps` would show its password. Loading it is also the pool's start-up check
(pipeline/servers.py `preflight`): a PostgreSQL or Redis this system cannot use stops the pool here,
with the reason and exit code 2, before any worker is forked; servers still unreachable after its wait of
30 s, with exit code 1 (a supervisor starts it again).
"""

import sys

from pipeline import servers, settings as _settings
from pipeline.core.errors import ConfigError


def _load() -> str:
    try:
        cfg = _settings.load()
        servers.preflight(cfg, say=lambda line: print(f"bin/rqconfig: {line}", file=sys.stderr))
    except (ConfigError, servers.ServerUnusable) as exc:
        print(f"bin/rqconfig: cannot start the workers: {exc}", file=sys.stderr)
        raise SystemExit(2)
    except Exception as exc:   # still unreachable after the wait: a supervisor may start the pool again
        print(f"bin/rqconfig: cannot reach the servers: {exc.__class__.__name__}: {exc}", file=sys.stderr)
        raise SystemExit(1)
    return servers.rq_redis_url(cfg)


REDIS_URL = _load()
