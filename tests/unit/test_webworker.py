"""The web worker's judgement of a request's bytes (bin/webworker.py `judge`): whole, refused, or more to come."""

import json
import runpy

import pytest

from bin.webworker import MAX_HEAD_BYTES, judge, refusal
from testkit.system import ROOT
from web.db import POOL_SIZE
from web.inputs import MAX_BODY_BYTES

HEAD = b"POST /api/contents HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"


def test_a_head_without_a_body_is_whole_once_its_blank_line_arrives():
    request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    assert not any(judge(request[:n]).whole for n in range(len(request)))
    assert judge(request).whole


def test_a_body_is_whole_once_its_content_length_arrived():
    body = b'{"title": "a"}'
    request = HEAD + f"Content-Length: {len(body)}\r\n\r\n".encode() + body
    assert not judge(request[:-1]).whole and judge(request[:-1]).refuse is None
    assert judge(request).whole
    assert judge(request + b"GET /next HTTP/1.1\r\n").whole   # the next request behind it waits its turn


def test_header_names_are_read_in_any_letter_case():
    request = HEAD + b"content-LENGTH:  3\r\n\r\nab"
    assert not judge(request).whole
    assert judge(request + b"c").whole


def test_a_client_waiting_for_100_continue_is_told_to_go_on_only_before_its_body():
    head = HEAD + b"Content-Length: 3\r\nExpect: 100-continue\r\n\r\n"
    assert judge(head).go_on
    assert not judge(head + b"a").go_on and not judge(head + b"a").whole


@pytest.mark.parametrize("request_bytes, status", [
    (b"GET / HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES, 431),
    (HEAD + f"Content-Length: {MAX_BODY_BYTES + 1}\r\n\r\n".encode(), 413),
    (HEAD + b"Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 411),
])
def test_what_the_app_would_refuse_or_cannot_be_gathered_is_refused_without_waiting(request_bytes, status):
    assert judge(request_bytes).refuse == status


@pytest.mark.parametrize("length", [b"x", b"-1", b"1, 2", b"\xd9\xa3"])
def test_a_content_length_that_is_not_one_number_is_handed_on_for_gunicorn_to_refuse(length):
    assert judge(HEAD + b"Content-Length: " + length + b"\r\n\r\n").whole


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
