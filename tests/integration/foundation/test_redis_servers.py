"""Hosted Redis as users have it: an ACL user with a password, TLS with a private CA, Redis 7 and Valkey 8;
each a real server started here. A job goes through each the way the system sends and runs one: enqueued
with our client, taken by an RQ worker on the connection RQ's command line makes from bin/rqconfig.py."""

from __future__ import annotations

import redis
import pytest
from prometheus_client.parser import text_string_to_metric_families
from rq import Queue, SimpleWorker

from bin.embedded import Valkey, free_port
from pipeline import servers, settings
from testkit.servers import Redis7, make_tls_files, require_debian
from testkit.webapp import make_app


def echo(value: str) -> str:
    return value


def round_trip(cfg: settings.Settings) -> str:
    """Enqueue with our client, run with an RQ worker on RQ's own connection; the job's answer."""
    ours = servers.redis_client(cfg)
    job = Queue("image", connection=ours).enqueue(echo, "through")
    rqs = redis.Redis.from_url(servers.rq_redis_url(cfg))   # what bin/rqconfig.py hands RQ's command line
    SimpleWorker([Queue("image", connection=rqs)], connection=rqs).work(burst=True)
    job.refresh()
    return job.return_value()


@pytest.fixture
def redis7_acl(tmp_path):
    require_debian("redis-server")
    server = Redis7(tmp_path / "redis", free_port())
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis7_tls(tmp_path):
    require_debian("redis-server")
    tls = make_tls_files(tmp_path / "tls")
    server = Redis7(tmp_path / "redis", free_port(), tls=tls)
    server.start()
    yield server
    server.stop()


def test_redis_7_with_an_acl_user_and_password_runs_jobs(redis7_acl):
    cfg = settings.load({"REDIS_URL": redis7_acl.url()})
    assert round_trip(cfg) == "through"


def test_redis_7_refuses_a_wrong_password_and_the_start_up_check_says_so(redis7_acl, database_url):
    wrong = redis7_acl.url().replace(redis7_acl.password, "not-the-password")
    cfg = settings.load({"REDIS_URL": wrong, "DATABASE_URL": database_url})
    with pytest.raises(servers.ServerUnusable, match="refused our credentials") as refused:
        servers.preflight(cfg, wait_seconds=0)
    assert "not-the-password" not in str(refused.value)


def test_rediss_with_the_private_ca_file_runs_jobs(redis7_tls):
    cfg = settings.load({"REDIS_URL": redis7_tls.url(), "REDIS_CA_FILE": str(redis7_tls.tls["ca"])})
    assert round_trip(cfg) == "through"


def test_rediss_checks_the_certificate_so_without_its_ca_the_start_up_check_names_the_setting(redis7_tls,
                                                                                              database_url):
    cfg = settings.load({"REDIS_URL": redis7_tls.url(), "DATABASE_URL": database_url})
    with pytest.raises(servers.ServerUnusable, match="REDIS_CA_FILE"):
        servers.preflight(cfg, wait_seconds=0)


def test_valkey_8_with_a_password_runs_jobs(tmp_path):
    server = Valkey(tmp_path / "valkey", free_port())
    server.start()
    try:
        client = redis.Redis.from_url(server.url())
        client.config_set("requirepass", "valkey-test-password-0123")
        assert client.info("server")["server_name"] == "valkey"
        url = f"redis://:valkey-test-password-0123@127.0.0.1:{server.port}/0"
        assert round_trip(settings.load({"REDIS_URL": url})) == "through"
    finally:
        server.stop()


def test_a_redis_that_may_evict_is_named_at_start_and_in_metrics(tmp_path, database_url):
    require_debian("redis-server")
    server = Redis7(tmp_path / "redis", free_port(), maxmemory_policy="allkeys-lru")
    server.start()
    try:
        cfg = settings.load({"REDIS_URL": server.url(), "DATABASE_URL": database_url})
        said = []
        servers.preflight(cfg, wait_seconds=0, say=said.append)
        assert any("maxmemory-policy is 'allkeys-lru'" in line and "LOST_DISPATCH_SECONDS" in line for line in said)
        app = make_app(database_url, server.url(), tmp_path / "media", METRICS_TOKEN="m" * 40)
        scraped = app.test_client().get("/metrics", headers={"Authorization": "Bearer " + "m" * 40})
        assert scraped.status_code == 200
        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for family in text_string_to_metric_families(scraped.data.decode()) for s in family.samples}
        assert samples[("mediapipe_redis_may_evict", (("policy", "allkeys-lru"),))] == 1.0
    finally:
        server.stop()


def test_a_redis_that_never_evicts_gets_no_warning(redis7_acl, database_url):
    cfg = settings.load({"REDIS_URL": redis7_acl.url(), "DATABASE_URL": database_url})
    said = []
    servers.preflight(cfg, wait_seconds=0, say=said.append)
    assert said == []
