"""Fixtures of the fault tests: a running system (workers as processes), whole stacks."""

import pytest

from testkit.system import System, start_stack, stop_stack, system_env


@pytest.fixture
def system(database_url, redis_url, tmp_path, fake):
    logs = tmp_path / "logs"
    logs.mkdir()
    running = System(system_env(database_url, redis_url, tmp_path / "media", fake.base_url), logs)
    yield running
    running.stop()


@pytest.fixture
def make_stack(system, tmp_path):
    started = []

    def make(**env):
        built = start_stack(system, tmp_path / f"redis-{len(started)}", owner=f"editor-{len(started)}", **env)
        started.append(built)
        return built
    yield make
    system.stop()
    for built in started:
        stop_stack(built)


@pytest.fixture
def stack(make_stack):
    return make_stack()
