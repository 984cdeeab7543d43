from pathlib import Path

import pytest

from bin.embedded import Valkey, free_port
from testkit.webapp import make_app

pytestmark = pytest.mark.server_major   # tests/unit/test_server_major.py: what depends on the server's major


def _client(database_url: str, redis_url: str):
    return make_app(database_url, redis_url).test_client()


def test_healthz_answers_while_the_process_lives(database_url, redis_url):
    assert _client(database_url, redis_url).get("/healthz").status_code == 200


def test_readyz_is_200_when_postgres_redis_and_schema_are_ready(database_url, redis_url):
    response = _client(database_url, redis_url).get("/readyz")
    assert response.status_code == 200, response.json
    assert response.json["checks"] == {"postgres": "ok", "redis": "ok"}


def test_readyz_is_503_naming_redis_when_redis_is_stopped(database_url, servers):
    # given a Redis server of our own that is then stopped
    valkey = Valkey(Path(servers.base) / f"redis-readyz-{free_port()}", free_port())
    valkey.start()
    client = _client(database_url, valkey.url())
    assert client.get("/readyz").status_code == 200
    valkey.stop()
    # then readiness fails and says which dependency
    response = client.get("/readyz")
    assert response.status_code == 503
    assert response.json["checks"]["redis"].startswith("Redis unreachable")
    assert response.json["checks"]["postgres"] == "ok"


def test_readyz_is_503_when_migrations_are_missing(empty_database_url, redis_url):
    response = _client(empty_database_url, redis_url).get("/readyz")
    assert response.status_code == 503
    assert "migrations missing: 0001_core" in response.json["checks"]["postgres"]


def test_readyz_tells_why_only_to_this_machine_or_the_metrics_token(empty_database_url, redis_url):
    from testkit.webapp import make_app
    app = make_app(empty_database_url, redis_url, METRICS_TOKEN="r" * 40)
    outside = app.test_client().get("/readyz", environ_base={"REMOTE_ADDR": "203.0.113.7"})
    assert outside.status_code == 503
    assert outside.json["checks"] == {"postgres": "failing", "redis": "ok"}
    assert "0001_core" not in outside.get_data(as_text=True)
    with_token = app.test_client().get("/readyz", environ_base={"REMOTE_ADDR": "203.0.113.7"},
                                       headers={"Authorization": "Bearer " + "r" * 40})
    assert "migrations missing: 0001_core" in with_token.json["checks"]["postgres"]
