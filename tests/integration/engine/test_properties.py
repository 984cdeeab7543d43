"""Random sequences of claims, heartbeats, completions, failures, lease expiries, new versions and
cancels against the real database; the invariants of docs/architecture.md are checked after every step."""

from datetime import datetime, timezone

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from pipeline import tasks, versions
from pipeline.core.errors import Ambiguous, Conflict, LeaseLost, Permanent, Transient
from pipeline.reconcile import Reconciler
from testkit.helpers import EDITOR, assert_pending_counts, claim, draft, make_settings

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major

ERRORS = {"transient": Transient("t"), "permanent": Permanent("p"), "ambiguous": Ambiguous("a")}


def machine_for(conn, cfg):
    class Engine(RuleBasedStateMachine):
        def __init__(self):
            super().__init__()
            conn.execute("TRUNCATE contents, versions, tasks, task_deps, outbox, events, dead_letters, assets, "
                         "asset_inputs, provider_calls, reconcile_runs, input_calls, pending_counts "
                         "RESTART IDENTITY CASCADE")
            self.content = versions.save(conn, draft(2), cfg, by=EDITOR).content_id
            self.version = 1
            self.holders: list[tasks.Task] = []
            self.attempts: dict = {}   # lease_token -> the holder's attempt (its heartbeat)
            self.calling: dict = {}   # lease_token -> (fingerprint, task id) of a call made and not yet answered

        def _task_ids(self, version=None):
            return [r["id"] for r in conn.execute("SELECT id FROM tasks WHERE version = coalesce(%s, version) "
                                                  "ORDER BY id", (version,))]

        def _current_token(self, task_id):
            row = conn.execute("SELECT status, lease_token FROM tasks WHERE id = %s", (task_id,)).fetchone()
            return row["lease_token"] if row["status"] == "running" else None

        @rule(pick=st.integers(0, 100), call=st.booleans(), newest=st.booleans())
        def claim(self, pick, call, newest):
            ids = self._task_ids(self.version if newest else None)
            task = self._claim(ids[pick % len(ids)], "w")
            if task:
                if call:
                    self._call(task)

        def _claim(self, task_id, worker):
            attempt = claim(cfg, task_id, worker=worker, lease_seconds=60)
            if attempt is None:
                return None
            self.holders.append(attempt.task)
            self.attempts[attempt.task.lease_token] = attempt
            return attempt.task

        def _call(self, holder):
            """The holder takes its input and calls the provider, if no other task holds that input."""
            if holder.kind != "bundle" and tasks.take_input(conn, holder, 60):
                self.calling[holder.lease_token] = (holder.fingerprint, holder.id)

        @rule(pick=st.integers(0, 100), outcome=st.sampled_from(["succeed", *ERRORS]))
        def finish(self, pick, outcome):
            if not self.holders:
                return
            holder = self.holders[pick % len(self.holders)]
            current = self._current_token(holder.id) == holder.lease_token
            self.calling.pop(holder.lease_token, None)   # the call, if one was made, has answered
            try:
                if outcome == "succeed":
                    tasks.succeed(conn, holder, tasks.Asset("e" * 64, "image/png", 1), actor="w")
                else:
                    tasks.fail_attempt(conn, holder, ERRORS[outcome], cfg, actor="w", now=datetime.now(timezone.utc))
                assert current, "a stale holder was allowed to write"
            except LeaseLost:
                assert not current, "the current holder was refused"

        @rule(pick=st.integers(0, 100))
        def a_holder_takes_its_input_and_calls(self, pick):
            if self.holders:
                self._call(self.holders[pick % len(self.holders)])

        @rule(pick=st.integers(0, 100))
        def heartbeat(self, pick):
            if self.holders:
                holder = self.holders[pick % len(self.holders)]
                attempt = self.attempts[holder.lease_token]
                assert attempt.beat()
                alive = not attempt.lost
                assert alive == (self._current_token(holder.id) == holder.lease_token)

        @rule()
        def leases_expire_and_the_reconciler_runs(self):
            conn.execute("UPDATE tasks SET lease_until = now() - interval '1 second' WHERE status = 'running'")
            Reconciler(cfg, conn, {}).run()

        @rule(pick=st.integers(0, 100))
        def a_lease_expires_and_another_worker_takes_over(self, pick):
            if not self.holders:
                return
            holder = self.holders[pick % len(self.holders)]
            self.leases_expire_and_the_reconciler_runs()
            self._claim(holder.id, "w2")

        @rule(roll=st.integers(0, 3), same_text=st.booleans())
        def new_version(self, roll, same_text):
            if roll:  # rarer than the rules that act inside a version
                return
            # the same text makes the same inputs: the new tasks meet calls the old ones have in flight
            prefix = "" if same_text else f"v{self.version + 1}"
            versions.save(conn, draft(2, prefix=prefix), cfg, by=EDITOR, content_id=self.content,
                          base_version=self.version)
            self.version += 1

        @rule(roll=st.integers(0, 7))
        def cancel_current(self, roll):
            if roll:  # a cancel ends a version's story: keep it rare so histories stay long
                return
            try:
                versions.cancel(conn, self.content, self.version, by=EDITOR)
            except Conflict as exc:   # a version with nothing left to cancel refuses, changing nothing
                assert exc.code == "nothing_to_cancel"

        @invariant()
        def at_most_one_task_calls_for_an_input(self):
            tasks_by_input: dict = {}
            for fingerprint, task_id in self.calling.values():
                tasks_by_input.setdefault(fingerprint, set()).add(task_id)
            assert all(len(ids) == 1 for ids in tasks_by_input.values()), tasks_by_input

        @invariant()
        def older_versions_have_no_unfinished_work(self):
            n = conn.execute("SELECT count(*) AS n FROM tasks t JOIN contents c ON c.id = t.content_id WHERE "
                             "t.version < c.current_version AND t.status IN ('ready','running','retry','unknown')"
                             ).fetchone()["n"]
            assert n == 0

        @invariant()
        def attempts_are_the_claims_and_history_ends_in_the_current_status(self):
            rows = conn.execute("""SELECT t.id, t.status, t.attempts,
                    (SELECT count(*) FROM events e WHERE e.task_id = t.id AND e.to_status = 'running') AS claims,
                    (SELECT e.to_status FROM events e WHERE e.task_id = t.id AND e.to_status IS NOT NULL
                     ORDER BY e.id DESC LIMIT 1) AS last
                    FROM tasks t""").fetchall()
            for r in rows:
                assert r["attempts"] == r["claims"]
                assert r["last"] in (None, r["status"])

        @invariant()
        def nothing_succeeds_after_its_version_was_cancelled_or_superseded(self):
            n = conn.execute("""SELECT count(*) AS n FROM events e JOIN versions v
                    ON v.content_id = e.content_id AND v.version = e.version
                    WHERE e.to_status = 'succeeded' AND v.cancel_requested_at IS NOT NULL
                      AND e.at > v.cancel_requested_at""").fetchone()["n"]
            assert n == 0

        @invariant()
        def pending_tasks_are_counted_as_they_change(self):
            assert_pending_counts(conn)

        @invariant()
        def unknown_is_never_left_automatically(self):
            n = conn.execute("SELECT count(*) AS n FROM events WHERE from_status = 'unknown' "
                             "AND to_status NOT IN ('superseded', 'cancelled')").fetchone()["n"]
            assert n == 0
    return Engine


@pytest.mark.slow
def test_random_histories_keep_the_engine_invariants(conn, database_url, redis_url, tmp_path):
    # no backoff, so a task recovered from an expired lease can be claimed again at once:
    # that is what puts a stale and a current holder side by side
    cfg = make_settings(database_url, redis_url, tmp_path, BACKOFF_BASE_SECONDS="0", BACKOFF_CAP_SECONDS="0")
    run_state_machine_as_test(machine_for(conn, cfg), settings=settings(
        max_examples=40, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)))
