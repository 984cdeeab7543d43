"""Slow clients do not take the web away from everyone else.

The web runs exactly as the Procfile's line starts it in the dev stack (`sh -c "exec gunicorn -c
bin/gunicorn_conf.py ..."`, WEB_CONCURRENCY=2). Fifty connections then hold on to it without ever finishing a
request: some send a request head a byte at a time, some send a whole head and then its body a byte at a time (with
a live key, so a worker that read the body inside the app would hold a database connection meanwhile), and some
connect and send nothing. While they are open, `/healthz` and a save must each answer within a second.
"""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import threading
import time

import pytest
import requests

from bin import devstack
from bin.embedded import free_port
from pipeline import keys, settings
from pipeline.db import connect
from testkit.helpers import lesson, wait_until
from testkit.system import ROOT

pytestmark = pytest.mark.slow

ANSWER_SECONDS = 1.0
HEAD_TRICKLERS, BODY_TRICKLERS, SILENT = 20, 15, 15   # fifty connections in all


class SlowClients:
    """Connections that each keep a request unfinished: a head or a body sent a byte at a time, or nothing at all.

    One thread sends the next byte of every trickling connection in turn, and opens a connection again if the
    server closed it, so the fifty stay open for as long as the test runs."""

    def __init__(self, port: int, token: str) -> None:
        self.port, self.token = port, token
        self.kinds = ["head"] * HEAD_TRICKLERS + ["body"] * BODY_TRICKLERS + ["silent"] * SILENT
        self.socks: list[socket.socket | None] = [None] * len(self.kinds)
        self.pending: list[bytes] = [b""] * len(self.kinds)
        self.sent = [0] * len(self.kinds)        # bytes sent a byte at a time on the current connection
        self.reopened = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _request(self, kind: str) -> tuple[bytes, bytes]:
        """What a connection sends at once, and what it then sends a byte at a time."""
        if kind == "head":
            return b"", (b"POST /api/contents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"a" * 100_000)
        body = b'{"title": "' + b"a" * 100_000
        head = (f"POST /api/contents HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {self.token}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body) + 2}\r\n\r\n").encode()
        return head, body

    def _open(self, i: int) -> None:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=5)
        sock.setblocking(False)
        at_once, self.pending[i] = (b"", b"") if self.kinds[i] == "silent" else self._request(self.kinds[i])
        if at_once:
            sock.setblocking(True)
            sock.sendall(at_once)
            sock.setblocking(False)
        self.socks[i], self.sent[i] = sock, 0

    def _closed_by_server(self, sock: socket.socket) -> bool:
        readable, _, _ = select.select([sock], [], [], 0)
        if not readable:
            return False
        try:
            return sock.recv(65536) == b""   # an answer (a 408, say) is read and ignored
        except OSError:
            return True

    def _run(self) -> None:
        while not self.stopping.is_set():
            for i, sock in enumerate(self.socks):
                if self.stopping.is_set():
                    return
                try:
                    if self._closed_by_server(sock):
                        sock.close()
                        self.reopened += 1
                        self._open(i)
                        continue
                    if self.kinds[i] != "silent" and self.sent[i] < len(self.pending[i]):
                        sock.send(self.pending[i][self.sent[i]:self.sent[i] + 1])
                        self.sent[i] += 1
                except OSError:
                    sock.close()
                    self.reopened += 1
                    self._open(i)
                time.sleep(0.01)   # the pace of the trickle: a byte about every half second per connection

    def __enter__(self) -> "SlowClients":
        for i in range(len(self.kinds)):
            self._open(i)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stopping.set()
        self.thread.join(10)
        for sock in self.socks:
            sock.close()

    def trickled(self, at_least: int) -> bool:
        """Every trickling connection has sent `at_least` bytes a byte at a time."""
        return all(n >= at_least for kind, n in zip(self.kinds, self.sent) if kind != "silent")


def start_web(database_url: str, redis_url: str, tmp_path, **extra: str) -> tuple[subprocess.Popen, str]:
    """The Procfile's web line, with the environment the dev stack gives it."""
    port = free_port()
    base = {**os.environ, "DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(tmp_path / "media"),
            "SECRET_KEY": "slow-clients-test-secret-0123456789-abcdefgh", **extra}
    env = devstack.process_env(base, settings.load({"PORT": str(port)}))
    command = dict(devstack.read_procfile())["web"]
    log = open(tmp_path / "web.log", "wb")
    web = subprocess.Popen(["/bin/sh", "-c", f"exec {command}"], cwd=ROOT, env=env, stdout=log,
                           stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        try:
            return requests.get(f"{url}/readyz", timeout=2).status_code == 200
        except requests.RequestException:
            return False
    wait_until(answers, timeout=60, message="the web answering /readyz")
    return web, url


def timed(call) -> float:
    """Seconds until the answer; infinity when none came within ten seconds."""
    started = time.monotonic()
    try:
        response = call()
    except requests.Timeout:
        return float("inf")
    assert response.status_code < 500, response.text
    return time.monotonic() - started


def test_health_and_a_save_answer_within_a_second_while_fifty_slow_clients_hold_connections(database_url, redis_url,
                                                                                             tmp_path):
    # given: the web as the Procfile starts it, and a live key
    with connect(database_url, autocommit=True) as conn:
        _, token = keys.create(conn, "slow-clients@example.com", "editor")
    web, url = start_web(database_url, redis_url, tmp_path)
    try:
        session = requests.Session()
        with SlowClients(int(url.rsplit(":", 1)[1]), token) as slow:
            # when: fifty connections hold requests open (every trickler well into its request)
            wait_until(lambda: slow.trickled(5), timeout=30, message="every slow client trickling")
            health, saves = [], []
            for round_ in range(5):
                health.append(timed(lambda: session.get(f"{url}/healthz", timeout=10)))
                saves.append(timed(lambda: session.post(
                    f"{url}/api/contents", json=lesson(1, title=f"slow clients {round_}"), timeout=10,
                    headers={"X-API-Key": token})))
                wait_until(lambda n=5 + 2 * (round_ + 1): slow.trickled(n), timeout=30,
                           message="the slow clients trickling on")
            # then: each answered within a second, and the slow clients were still there the whole time
            took = f"/healthz took {[round(t, 3) for t in health]} s, the saves {[round(t, 3) for t in saves]} s"
            assert max(health) < ANSWER_SECONDS and max(saves) < ANSWER_SECONDS, took
            assert slow.reopened == 0
    finally:
        os.killpg(web.pid, 15)
        web.wait(30)


def answers_on(port: int, *parts: bytes, count: int = 1, pause: float = 0.0, timeout: float = 10) -> bytes:
    """What the web sends back on one connection that sends `parts` (`pause` s apart), read until `count` final
    answers have come, or the web closed the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        for i, part in enumerate(parts):
            if i and pause:
                time.sleep(pause)   # the client's own pace between its pieces
            sock.sendall(part)
        received = b""
        while received.count(b"HTTP/1.1 ") - received.count(b"HTTP/1.1 100 ") < count:
            piece = sock.recv(65536)
            if not piece:
                break
            received += piece
        return received


def status_lines(answer: bytes) -> list[str]:
    return [line.decode() for line in re.findall(rb"HTTP/1\.1 \d{3} [^\r]*", answer)]


def test_the_web_refuses_requests_it_will_not_gather_and_serves_pipelined_and_pieced_ones(database_url, redis_url,
                                                                                         tmp_path):
    web, url = start_web(database_url, redis_url, tmp_path, WEB_REQUEST_SECONDS="2")
    port = int(url.rsplit(":", 1)[1])
    health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    post = b"POST /api/contents HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    try:
        # a request not whole within WEB_REQUEST_SECONDS, or nothing at all: 408, and the connection closes
        started = time.monotonic()
        assert status_lines(answers_on(port, b"GET /healthz HTTP/1.1\r\nHost: 1")) == ["HTTP/1.1 408 Request Timeout"]
        assert 1.5 < time.monotonic() - started < 4
        assert status_lines(answers_on(port)) == ["HTTP/1.1 408 Request Timeout"]
        # what the app would refuse, or a body without a length: refused at once, nothing read or run
        assert status_lines(answers_on(port, post + b"Content-Length: 2000000\r\n\r\n")) == [
            "HTTP/1.1 413 Content Too Large"]
        assert status_lines(answers_on(port, post + b"Transfer-Encoding: chunked\r\n\r\n")) == [
            "HTTP/1.1 411 Length Required"]
        # a client that waits for 100 Continue gets it before it sends its body, then the app's answer
        body = b'{"title": "t"}'
        answer = answers_on(port, post + f"Content-Length: {len(body)}\r\nExpect: 100-continue\r\n\r\n".encode(),
                            body, pause=0.3)
        assert status_lines(answer)[0] == "HTTP/1.1 100 Continue" and status_lines(answer)[-1].startswith("HTTP/1.1 401")
        # two requests in one send are both answered, in order, on the kept-alive connection
        assert status_lines(answers_on(port, health + health, count=2)) == ["HTTP/1.1 200 OK"] * 2
        # a request that arrives in pieces, within the time, is answered as one
        assert status_lines(answers_on(port, health[:10], health[10:30], health[30:], pause=0.3)) == ["HTTP/1.1 200 OK"]
    finally:
        os.killpg(web.pid, 15)
        web.wait(30)
