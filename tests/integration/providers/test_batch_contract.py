"""The Batch API contract: our client's calls against the strict fake, and what the fake refuses as the API does.

The rules and where the API reference states them are in testkit/fakeprovider/batch.py.
"""

from __future__ import annotations

import io
import json

import pytest
import requests

from providers.errors import Permanent, Refused
from providers.http_classify import HttpStatus, classify
from providers.http_endpoint import Limits
from providers.openai_batch import BatchClient, request_line, result_lines
from providers.openai_http import image_payload
from testkit.fakeprovider import FakeProviderServer
from testkit.helpers import wait_until

KEY = "sk-batch-contract"


@pytest.fixture
def fake():
    with FakeProviderServer() as server:
        server.batch.script.seconds = 0.0
        yield server


@pytest.fixture
def client(fake):
    return BatchClient(base_url=fake.base_url + "/v1", api_key=KEY, session=requests.Session(),
                       limits=Limits(2.0, 5.0, 10.0, 10 * 1024 * 1024))


def jsonl(*lines: bytes) -> io.BytesIO:
    return io.BytesIO(b"".join(lines))


def line(custom_id: str, prompt: str = "a red lantern") -> bytes:
    return request_line(custom_id, image_payload("gpt-image-2", prompt, "1024x1024", {"quality": "low"}))


def raw(fake, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, fake.base_url + path, headers={"Authorization": f"Bearer {KEY}"}, timeout=5,
                            **kw)


def test_a_batch_runs_its_lines_and_answers_each_by_custom_id_with_usage(fake, client):
    uploaded = client.upload("in.jsonl", jsonl(line("k1"), line("k2", "A FORBIDDEN thing")))
    batch = client.create(uploaded["id"], "ours-1")
    assert batch["status"] == "in_progress" and batch["metadata"] == {"mediapipe_batch": "ours-1"}
    done = wait_until(lambda: (b := client.get(batch["id"]))["status"] == "completed" and b, timeout=10)
    out, err = io.BytesIO(), io.BytesIO()
    client.download(done["output_file_id"], out, 10**8)
    client.download(done["error_file_id"], err, 10**8)
    (ok,), (refused,) = list(result_lines(io.BytesIO(out.getvalue()))), list(result_lines(io.BytesIO(err.getvalue())))
    assert ok.custom_id == "k1" and ok.status_code == 200 and ok.body["usage"]["output_tokens_details"]["image_tokens"] == 200
    assert refused.custom_id == "k2" and refused.status_code == 400
    error = classify(HttpStatus(refused.status_code, {}, json.dumps(refused.body).encode()))
    assert isinstance(error, Refused) and isinstance(error, Permanent)
    assert fake.calls_for("k1").executions == 1 and fake.calls_for("k2").executions == 0


def test_a_batch_is_found_by_the_name_in_its_metadata_across_pages(fake, client):
    file_id = client.upload("in.jsonl", jsonl(line("a")))["id"]
    wanted = client.create(file_id, "the-one")
    for n in range(120):   # more than one page of GET /v1/batches (at most 100 per page)
        client.create(file_id, f"other-{n}")
    assert client.find("the-one")["id"] == wanted["id"]
    assert client.find("never-made") is None
    assert client.find_file("in.jsonl")["id"] == file_id


@pytest.mark.parametrize("body,param", [
    ({"endpoint": "/v1/audio/speech", "completion_window": "24h"}, "endpoint"),   # speech is not a batch endpoint
    ({"endpoint": "/v1/images/generations", "completion_window": "48h"}, "completion_window"),
    ({"endpoint": "/v1/images/generations", "completion_window": "24h",
      "metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
])
def test_the_fake_refuses_a_create_the_api_refuses(fake, client, body, param):
    file_id = client.upload("in.jsonl", jsonl(line("a")))["id"]
    answer = raw(fake, "POST", "/v1/batches", json={"input_file_id": file_id, **body})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param
    assert fake.batch.created == 0


def test_the_fake_refuses_a_file_of_another_purpose_or_format(fake):
    files = {"file": ("in.jsonl", b"{}\n", "application/jsonl")}
    assert raw(fake, "POST", "/v1/files", data={"purpose": "training"}, files=files).status_code == 400
    assert raw(fake, "POST", "/v1/files", data={"purpose": "batch"},
               files={"file": ("in.csv", b"a,b\n", "text/csv")}).status_code == 400
    tuned = raw(fake, "POST", "/v1/files", data={"purpose": "fine-tune"}, files=files).json()["id"]
    answer = raw(fake, "POST", "/v1/batches", json={"input_file_id": tuned, "endpoint": "/v1/images/generations",
                                                    "completion_window": "24h"})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == "input_file_id"


def test_a_file_with_a_repeated_custom_id_or_a_wrong_url_fails_validation(fake, client):
    wrong_url = json.dumps({"custom_id": "c", "method": "POST", "url": "/v1/audio/speech", "body": {}}).encode()
    file_id = client.upload("in.jsonl", jsonl(line("a"), line("a"), wrong_url + b"\n"))["id"]
    batch = client.create(file_id, "bad")
    assert batch["status"] == "failed"
    codes = [e["code"] for e in batch["errors"]["data"]]
    assert codes == ["duplicate_custom_id", "mismatched_url"]
    assert fake.calls_for("a").executions == 0


def test_list_limits_are_the_apis(fake):
    assert raw(fake, "GET", "/v1/batches", params={"limit": 101}).status_code == 400
    assert raw(fake, "GET", "/v1/batches", params={"limit": 0}).status_code == 400
    assert raw(fake, "GET", "/v1/batches").json() == {"object": "list", "data": [], "first_id": None,
                                                     "last_id": None, "has_more": False}


def test_an_expired_batch_keeps_its_finished_lines_and_lists_the_rest_as_expired(fake, client):
    fake.batch.script.expire_after = 1
    file_id = client.upload("in.jsonl", jsonl(line("x1"), line("x2"), line("x3")))["id"]
    done = client.get(client.create(file_id, "late")["id"])
    assert done["status"] == "expired" and done["request_counts"] == {"total": 3, "completed": 1, "failed": 2}
    err = io.BytesIO()
    client.download(done["error_file_id"], err, 10**8)
    expired = list(result_lines(io.BytesIO(err.getvalue())))
    assert [(r.custom_id, r.error["code"]) for r in expired] == [("x2", "batch_expired"), ("x3", "batch_expired")]


def test_a_cancelled_batch_runs_nothing_more(fake, client):
    fake.batch.script.seconds = 3600
    file_id = client.upload("in.jsonl", jsonl(line("c1")))["id"]
    batch = client.create(file_id, "stop")
    assert client.cancel(batch["id"])["status"] == "cancelling"
    assert client.get(batch["id"])["status"] == "cancelled"
    assert fake.calls_for("c1").executions == 0


def test_every_call_needs_the_key(fake):
    assert requests.get(fake.base_url + "/v1/batches", timeout=5).status_code == 401
