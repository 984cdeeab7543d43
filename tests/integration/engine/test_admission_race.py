"""Admission is exact under racing savers: saves at the limit from many sessions at once admit exactly
what fits, every refused save writes nothing, and every accepted save is there (no false 202)."""

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline import versions
from pipeline.core.errors import CapacityExceeded, KeyLimitReached
from pipeline.db import connect
from testkit.helpers import EDITOR, draft, keyed, make_settings

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

SAVERS = 12
ROUNDS = 6


def race(database_url, cfg, *, by=EDITOR, reset=False):
    """SAVERS sessions save 1-block lessons (3 tasks each) as `by` at once, ROUNDS times; the saves accepted in each
    round. `reset`: after each round every accepted version is cancelled, so the next one races from zero."""
    start = threading.Barrier(SAVERS)
    done = threading.Barrier(SAVERS)
    rounds = [[] for _ in range(ROUNDS)]

    def saver(i):
        with connect(database_url, autocommit=True) as c:
            for r in range(ROUNDS):
                start.wait()
                try:
                    rounds[r].append(versions.save(c, draft(1, prefix=f"s{i}r{r}"), cfg, by=by))
                except (CapacityExceeded, KeyLimitReached):
                    pass
                if done.wait() == 0 and reset:   # one saver clears the round while the others wait
                    for s in rounds[r]:
                        versions.cancel(c, s.content_id, s.version, by=EDITOR)
                done.wait()
    with ThreadPoolExecutor(SAVERS) as pool:
        list(pool.map(saver, range(SAVERS)))
    return rounds


def written(conn):
    return conn.execute(
        "SELECT (SELECT count(*) FROM contents) AS contents, (SELECT count(*) FROM versions) AS versions, "
        "(SELECT count(*) FROM tasks) AS tasks, (SELECT count(*) FROM outbox) AS outbox, "
        "(SELECT count(*) FROM task_deps) AS deps, "
        "(SELECT count(*) FROM tasks WHERE status IN ('ready', 'running', 'retry')) AS pending").fetchone()


def test_racing_savers_at_the_limit_admit_exactly_what_fits_and_refused_saves_write_nothing(
        database_url, redis_url, tmp_path, conn):
    # given a limit of 15 pending tasks, and twelve sessions that save 3 tasks each at once, six times over,
    # every round starting from nothing pending
    cfg = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="15")
    # when they race
    rounds = race(database_url, cfg, reset=True)
    # then every round admitted exactly five saves (15 tasks)
    assert [len(accepted) for accepted in rounds] == [5] * ROUNDS
    # and the database holds exactly the admitted saves: nothing of a refused one, every accepted one
    assert dict(written(conn)) == {"contents": 5 * ROUNDS, "versions": 5 * ROUNDS, "tasks": 15 * ROUNDS,
                                   "outbox": 0, "deps": 10 * ROUNDS, "pending": 0}
    stored = {(r["content_id"], r["version"]) for r in conn.execute("SELECT content_id, version FROM versions")}
    assert stored == {(s.content_id, s.version) for accepted in rounds for s in accepted}


def test_racing_saves_of_one_key_never_pass_its_own_pending_limit(database_url, redis_url, tmp_path, conn):
    # given a key that may hold 30 pending tasks, under a shared limit far away
    cfg = make_settings(database_url, redis_url, tmp_path, MAX_PENDING_TASKS="1000", KEY_MAX_PENDING_TASKS="30",
                        KEY_SAVES_PER_MINUTE="1000")
    # when twelve of its sessions race, six saves each
    rounds = race(database_url, cfg, by=keyed(7))
    # then ten saves fit (30 tasks), the rest were refused and wrote nothing
    assert sum(len(accepted) for accepted in rounds) == 10
    assert (written(conn)["tasks"], written(conn)["versions"]) == (30, 10)
