"""The web worker's reading of a request's bytes as they arrive (bin/webworker.py `Gathering`): whole, refused, or
more to come."""

import json
import runpy
import time

import pytest

from bin.webworker import MAX_HEAD_BYTES, Gathering, Verdict, refusal
from testkit.system import ROOT
from web.db import POOL_SIZE
from web.inputs import MAX_BODY_BYTES

HEAD = b"POST /api/contents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def byte_by_byte(request: bytes) -> list[Verdict]:
    """What each byte of `request`, sent on its own, calls for."""
    gathering = Gathering(until=0.0)
    return [gathering.take(request[i:i + 1]) for i in range(len(request))]


def test_a_head_without_a_body_is_whole_once_its_blank_line_arrives_even_a_byte_at_a_time():
    verdicts = byte_by_byte(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    assert verdicts[-1].whole and not any(v.whole or v.refuse for v in verdicts[:-1])


def test_a_body_is_whole_once_its_content_length_arrived_and_what_follows_waits_its_turn():
    body = b'{"title": "a"}'
    request = HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    verdicts = byte_by_byte(request)
    assert verdicts[-1].whole and not any(v.whole or v.refuse for v in verdicts[:-1])
    assert Gathering(until=0.0).take(request + b"GET /next HTTP/1.1\r\n").whole


def test_header_names_are_read_in_any_letter_case():
    gathering = Gathering(until=0.0)
    assert gathering.take(HEAD + b"content-LENGTH:  3\r\n\r\nab") == Verdict()
    assert gathering.take(b"c").whole


def test_a_client_waiting_for_100_continue_is_told_to_go_on_once_before_its_body():
    gathering = Gathering(until=0.0)
    assert gathering.take(HEAD + b"Content-Length: 3\r\nExpect: 100-continue\r\n\r\n").go_on
    assert gathering.take(b"a") == Verdict() and gathering.take(b"bc").whole


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET / HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES, 431),
    (b"GET / HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", 431),
    (HEAD + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(), 413),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 411),
])
def test_what_the_app_would_refuse_or_cannot_be_gathered_is_refused_without_waiting(request_bytes, status):
    assert Gathering(until=0.0).take(request_bytes).refuse == status


@pytest.mark.parametrize("length", [b"x", b"-1", b"1, 2", b"\xd9\xa3"])
def test_a_content_length_that_is_not_one_number_is_handed_on_for_gunicorn_to_refuse(length):
    assert Gathering(until=0.0).take(HEAD + b"Content-Length: " + length + b"\r\n\r\n").whole


def test_a_trickled_megabyte_costs_time_in_proportion_to_its_length_not_its_square():
    # given: a body of the largest size the app takes, sent in 10-byte pieces
    gathering = Gathering(until=0.0)
    gathering.take(HEAD + f"Content-Length: {MAX_BODY_BYTES}\r\n\r\n".encode())
    piece = b"a" * 10
    started = time.process_time()
    verdicts = [gathering.take(piece) for _ in range(MAX_BODY_BYTES // 10 - 1)]
    # then: about 100,000 pieces take well under a second of CPU (0.05 s here; copying what came before with each
    # piece, as a first version did, took 2.3 s for this one connection), and the last one makes it whole
    assert time.process_time() - started < 0.5 and not any(v.whole for v in verdicts)
    assert gathering.take(b"a" * (MAX_BODY_BYTES % 10 + 10)).whole


def test_a_refusal_is_a_whole_answer_in_the_apis_error_shape_that_closes_the_connection():
    answer = refusal(413)
    head, body = answer.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in head
    assert f"Content-Length: {len(body)}".encode() in head
    assert json.loads(body)["error"]["code"] == "request_entity_too_large"


def test_the_web_runs_one_thread_per_connection_of_its_database_pool():
    conf = runpy.run_path(str(ROOT / "bin" / "gunicorn_conf.py"))
    assert conf["worker_class"] == "bin.webworker.WholeRequestWorker"
    assert conf["threads"] == POOL_SIZE
