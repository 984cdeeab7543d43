"""What the start-up checks say about servers we cannot use, without a server: the rules on what was found."""

import psycopg
import pytest

from pipeline import servers, settings


def test_postgresql_14_is_refused_naming_the_version_found_and_the_versions_supported():
    refusal = servers.version_refusal(140012, "db.example.com:5432")
    assert "PostgreSQL 14.12 at db.example.com:5432 is too old" in refusal
    assert "15 or newer (tested on 15, 16, 17, 18)" in refusal


@pytest.mark.parametrize("version", [150018, 160004, 170002, 180006])
def test_every_supported_major_passes_the_version_check(version):
    assert servers.version_refusal(version, "db.example.com:5432") is None


def test_a_pooler_refusing_our_startup_options_is_told_apart_and_the_fix_named():
    exc = psycopg.OperationalError('connection failed: connection to server at "127.0.0.1", port 6432 failed: '
                                   'FATAL:  unsupported startup parameter: options')
    explained = servers.explained(exc, "DATABASE_URL", "postgresql://app:hunter2-secret@127.0.0.1:6432/db")
    assert isinstance(explained, servers.ServerUnusable)
    assert "DB_POOLER=pgbouncer" in str(explained) and "DATABASE_SESSION_URL" in str(explained)
    assert "hunter2-secret" not in str(explained) and "app:***@127.0.0.1:6432" in str(explained)


@pytest.mark.parametrize("text", ["Connection refused\n\tIs the server running on that host?",
                                  "FATAL:  the database system is starting up", "timeout expired"])
def test_a_server_that_is_only_not_up_yet_is_worth_waiting_for(text):
    exc = psycopg.OperationalError(f"connection failed: {text}")
    assert servers.explained(exc, "DATABASE_URL", "postgresql://h/db") is exc


@pytest.mark.parametrize("text", ['FATAL:  password authentication failed for user "app"',
                                  'FATAL:  database "lessons" does not exist'])
def test_a_refused_login_or_a_missing_database_is_not_waited_for(text):
    exc = psycopg.OperationalError(f"connection failed: {text}")
    assert isinstance(servers.explained(exc, "DATABASE_URL", "postgresql://h/db"), servers.ServerUnusable)


def test_a_url_that_does_not_parse_is_refused_with_its_password_masked():
    with pytest.raises(settings.ConfigError) as refused:
        settings.load({"DATABASE_URL": "mysql://app:hunter2-secret@db/lessons"})
    assert "hunter2-secret" not in str(refused.value) and "app:***@db" in str(refused.value)


def test_rqs_url_carries_the_private_ca_only_for_tls(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    tls = settings.load({"REDIS_URL": "rediss://app:pw@r.example.com:6380/0", "REDIS_CA_FILE": str(ca)})
    assert servers.rq_redis_url(tls) == f"rediss://app:pw@r.example.com:6380/0?ssl_ca_certs={ca}"
    plain = settings.load({"REDIS_URL": "redis://app:pw@r.example.com:6379/0", "REDIS_CA_FILE": str(ca)})
    assert servers.rq_redis_url(plain) == "redis://app:pw@r.example.com:6379/0"


def test_through_a_pooler_no_startup_options_and_no_prepared_statements_are_sent():
    direct = servers.connect_params(settings.load({}))
    pooled = servers.connect_params(settings.load({"DB_POOLER": "pgbouncer"}))
    assert "statement_timeout=30000" in direct["options"] and "prepare_threshold" not in direct
    assert "options" not in pooled and pooled["prepare_threshold"] is None


def test_bounds_that_differ_from_the_settings_are_named_with_the_fix():
    cfg = settings.load({})
    same = {"statement_timeout": 30000, "lock_timeout": 5000, "idle_in_transaction_session_timeout": 60000}
    assert servers.bounds_warning(same, cfg) is None
    warning = servers.bounds_warning({**same, "statement_timeout": 0}, cfg)
    assert "statement_timeout is 0 ms, not 30000" in warning and "bin/migrate" in warning
