"""Sending webhook messages to a real receiver on 127.0.0.1 that verifies them with the `standardwebhooks` library:
signed, retried with the same webhook-id until a 2xx, dead after the retry window, a 410 disabling the endpoint,
redirects not followed, answers read bounded, addresses checked again at every attempt (pipeline/webhook_delivery.py,
pipeline/webhook_http.py)."""

from __future__ import annotations

import dataclasses
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pipeline import webhook_delivery, webhooks
from pipeline.core.errors import NotFound
from pipeline.core.webhooks import UnsafeURL
from testkit.helpers import OPERATOR, make_settings, wait_until
from testkit.receiver import Receiver, send_webhooks

pytestmark = pytest.mark.server_major   # the events come from triggers of ours

FAST = {"WEBHOOK_ALLOW_NETWORKS": "127.0.0.0/8", "WEBHOOK_BACKOFF_BASE_SECONDS": "0.1",
        "WEBHOOK_BACKOFF_CAP_SECONDS": "0.2", "WEBHOOK_TIMEOUT_SECONDS": "1", "SECRET_KEY": "x" * 40}


@pytest.fixture
def cfg(database_url, redis_url, media_dir):
    yield make_settings(database_url, redis_url, media_dir, **FAST)
    webhook_delivery.install(None)


@pytest.fixture
def receiver():
    with Receiver() as r:
        yield r


def event(conn, team: str = "default") -> int:
    """A version.withdrawn event of a content of `team`, written by its trigger as a withdrawal writes it."""
    content = conn.execute("INSERT INTO contents (title, locale, current_version, approved_version, team) "
                           "VALUES ('t', 'zh-CN', 1, 1, %s) RETURNING id", (team,)).fetchone()["id"]
    conn.execute("UPDATE contents SET approved_version = NULL WHERE id = %s", (content,))
    return content


def registered(conn, cfg, receiver: Receiver, **kw) -> dict:
    made = webhooks.add(conn, cfg, team="default", url=receiver.url, events=kw.pop("events", None), by=OPERATOR, **kw)
    receiver.secret = made.secret
    return made.endpoint


def deliveries(conn) -> list[dict]:
    return conn.execute("SELECT * FROM webhook_deliveries ORDER BY id").fetchall()


def attempts(conn) -> list[tuple]:
    return [(r["attempt"], r["http_status"], r["outcome"]) for r in
            conn.execute("SELECT * FROM webhook_attempts ORDER BY id").fetchall()]


def until_settled(cfg, conn, timeout: float = 20) -> list[dict]:
    """Dispatch and send (in this process) until no message is pending."""
    def settled():
        send_webhooks(cfg)
        rows = deliveries(conn)
        return rows if rows and all(r["status"] != "pending" for r in rows) else None
    return wait_until(settled, timeout=timeout, interval=0.05, message="every message settled")


def test_a_receiver_failing_three_times_gets_the_same_signed_message_until_it_answers_200(cfg, conn, receiver):
    # given an endpoint whose receiver answers 500 three times, then 200
    registered(conn, cfg, receiver)
    receiver.script(500, 500, 500)
    content = event(conn)
    # when the message is sent until it settles
    [row] = until_settled(cfg, conn)
    # then it was delivered on the fourth attempt, every attempt verified, with one webhook-id and one body
    got = receiver.messages(answered=None)
    assert [r.answered for r in got] == [500, 500, 500, 200]
    assert all(r.verified for r in got) and {r.webhook_id for r in got} == {f"msg_{row['id']}"}
    assert len({r.body for r in got}) == 1 and got[0].data["content_id"] == content
    assert row["status"] == "delivered" and row["attempts"] == 4
    assert attempts(conn) == [(1, 500, "retry"), (2, 500, "retry"), (3, 500, "retry"), (4, 200, "delivered")]


def test_a_message_taken_before_its_retry_time_is_not_sent(cfg, conn, receiver):
    registered(conn, cfg, receiver)
    receiver.script(500)
    event(conn)
    send_webhooks(cfg)
    [row] = deliveries(conn)
    assert row["status"] == "pending" and row["available_at"] > row["created_at"]
    # a duplicate RQ message for it, before its time, takes nothing and sends nothing
    sender = webhook_delivery.Sender(dataclasses.replace(cfg, webhooks=dataclasses.replace(
        cfg.webhooks, backoff_base_seconds=60, backoff_cap_seconds=60)))
    conn.execute("UPDATE webhook_deliveries SET available_at = now() + interval '1 minute'")
    assert sender.deliver(row["id"]) == "not_due"
    assert len(receiver.messages(answered=None)) == 1


def test_a_rotated_secret_signs_beside_the_new_one_during_the_overlap_and_not_after(cfg, conn, receiver):
    hook = registered(conn, cfg, receiver)
    old = receiver.secret
    new = webhooks.rotate(conn, cfg, hook["id"], overlap_seconds=3600).secret
    event(conn)
    until_settled(cfg, conn)
    [first] = receiver.messages()
    assert first.verified and first.signature.count("v1,") == 2
    for secret in (old, new):   # a receiver on either secret accepts it
        receiver.secret = secret
        assert receiver.verified(first.body, first.headers)
    webhooks.rotate(conn, cfg, hook["id"], overlap_seconds=0)
    event(conn)
    until_settled(cfg, conn)
    second = receiver.messages()[1]
    assert second.signature.count("v1,") == 1 and not receiver.verified(second.body, second.headers)


def test_a_410_disables_the_endpoint_and_its_other_pending_messages_die(cfg, conn, receiver):
    hook = registered(conn, cfg, receiver)
    receiver.script(410)
    event(conn)
    event(conn)
    rows = until_settled(cfg, conn)
    assert [r["status"] for r in rows] == ["dead", "dead"]
    assert len(receiver.messages(answered=None)) == 1   # the second was never sent
    endpoint = webhooks.endpoint(conn, hook["id"])
    assert endpoint["disabled_at"] is not None and "410" in endpoint["disabled_reason"]
    # no event reaches a disabled endpoint; once enabled, its dead messages can be sent again, same ids
    event(conn)
    assert len(deliveries(conn)) == 2
    webhooks.enable(conn, hook["id"])
    assert webhooks.send_again(conn, hook["id"]) == [r["id"] for r in rows]
    until_settled(cfg, conn)
    assert [r.webhook_id for r in receiver.messages()] == [f"msg_{r['id']}" for r in rows]


def test_a_message_not_delivered_within_the_retry_window_is_dead_and_send_again_revives_it(cfg, conn, receiver):
    short = make_settings(cfg.database_url, cfg.redis_url, cfg.media_dir, **FAST, WEBHOOK_RETRY_SECONDS="1")
    hook = registered(conn, short, receiver)
    receiver.script(*[503] * 100)
    event(conn)
    [row] = until_settled(short, conn)
    assert row["status"] == "dead" and "not delivered after" in row["dead_reason"]
    assert attempts(conn)[-1][2] == "dead" and all(a[1] == 503 for a in attempts(conn))
    receiver.script()
    assert webhooks.send_again(conn, hook["id"], [row["id"]]) == [row["id"]]
    [row] = until_settled(short, conn)
    assert row["status"] == "delivered" and receiver.messages()[0].webhook_id == f"msg_{row['id']}"


def test_redirects_are_not_followed_and_a_slow_or_huge_answer_is_cut_off(cfg, conn):
    # a receiver that redirects to another server, then one that sends 50 MB, then one that drips its headers
    followed = []
    modes = ["redirect", "huge", "drip"]

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            self.rfile.read(int(self.headers["content-length"]))
            mode = modes.pop(0) if modes else "ok"
            if mode == "redirect":
                self.send_response(307)
                self.send_header("location", f"http://127.0.0.1:{self.server.server_port}/followed")
                self.send_header("content-length", "0")
                self.end_headers()
            elif mode == "huge":
                self.send_response(500)
                self.send_header("content-length", str(50 * 2**20))
                self.end_headers()
                try:
                    for _ in range(50 * 16):
                        self.wfile.write(b"x" * 65536)
                except OSError:
                    pass
            elif mode == "drip":
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                try:
                    for _ in range(100):
                        self.wfile.write(b"x-slow: 1\r\n")
                        self.wfile.flush()
                        time.sleep(0.1)
                except OSError:
                    pass
            else:
                self.send_response(204)
                self.end_headers()

        def do_GET(self):  # noqa: N802
            followed.append(self.path)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        webhooks.add(conn, cfg, team="default", url=f"http://127.0.0.1:{server.server_port}/h", events=None,
                     by=OPERATOR)
        event(conn)
        until_settled(cfg, conn)
    finally:
        server.shutdown()
        server.server_close()
    rows = conn.execute("SELECT * FROM webhook_attempts ORDER BY id").fetchall()
    assert [(r["http_status"], r["outcome"]) for r in rows] == [(307, "retry"), (500, "retry"), (None, "retry"),
                                                                (204, "delivered")]
    assert followed == []
    assert rows[1]["latency_ms"] < 1000 and len(rows[1]["error"]) < 300   # 4 KiB read, 200 characters kept
    assert "no answer within 1 s" in rows[2]["error"] and rows[2]["latency_ms"] < 2500


def test_an_address_refused_at_send_time_is_never_contacted(cfg, conn, receiver):
    # registered while 127.0.0.0/8 was allowed; the workers' settings no longer allow it
    registered(conn, cfg, receiver)
    strict = make_settings(cfg.database_url, cfg.redis_url, cfg.media_dir,
                           **{**FAST, "WEBHOOK_ALLOW_NETWORKS": "10.0.0.0/8", "WEBHOOK_RETRY_SECONDS": "1"})
    event(conn)
    [row] = until_settled(strict, conn)
    assert row["status"] == "dead" and receiver.messages(answered=None) == []
    assert "loopback" in row["last_error"] and row["last_status"] is None


@pytest.mark.parametrize("url, words", [
    ("https://10.1.2.3/h", "private"), ("https://192.168.0.10/h", "private"), ("https://169.254.169.254/h", "metadata"),
    ("https://[fe80::1]/h", "link-local"), ("http://127.0.0.1:9/h", "loopback"), ("https://localhost/h", "loopback"),
    ("https://no-such-host.invalid/h", "does not resolve")])
def test_registration_refuses_addresses_that_are_not_public_unless_allowed(database_url, redis_url, media_dir, conn,
                                                                            url, words):
    strict = make_settings(database_url, redis_url, media_dir, SECRET_KEY="x" * 40)
    with pytest.raises(UnsafeURL, match=words):
        webhooks.add(conn, strict, team="default", url=url, events=None, by=OPERATOR)
    assert conn.execute("SELECT count(*) AS n FROM webhook_endpoints").fetchone()["n"] == 0


def test_an_endpoint_of_an_unknown_team_is_refused(cfg, conn, receiver):
    with pytest.raises(NotFound, match="team 'nobody' does not exist"):
        webhooks.add(conn, cfg, team="nobody", url=receiver.url, events=None, by=OPERATOR)


def test_the_dead_workers_attempt_is_recorded_as_lost_and_the_message_sent_again(cfg, conn, receiver):
    # given a message a worker took and never settled (it died mid-send): its lease ran out, its RQ message is gone
    registered(conn, cfg, receiver)
    event(conn)
    [row] = deliveries(conn)
    conn.execute("UPDATE webhook_deliveries SET attempts = 1, lease_token = gen_random_uuid(), "
                 "lease_until = now() - interval '1 second', sent_at = now() - interval '1 minute' WHERE id = %s",
                 (row["id"],))
    [row] = until_settled(cfg, conn)
    assert row["status"] == "delivered" and attempts(conn) == [(1, None, "lost"), (2, 200, "delivered")]


def test_retention_deletes_old_settled_events_with_their_messages_and_keeps_pending_ones(cfg, conn, receiver):
    from pipeline.reconcile import Reconciler
    registered(conn, cfg, receiver)
    event(conn)
    until_settled(cfg, conn)
    receiver.script(500)
    event(conn)
    send_webhooks(cfg)   # the second one failed once and waits for its retry
    # given both events are past MEDIA_RETENTION_DAYS
    conn.execute("UPDATE webhook_events SET created_at = now() - interval '400 days'")
    report = Reconciler(cfg, conn, {}).run()
    assert report.counts["webhook_events_deleted"] == 1
    assert [r["status"] for r in deliveries(conn)] == ["pending"]
    assert [a[2] for a in attempts(conn)] == ["retry"]
