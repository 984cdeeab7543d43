"""The OpenAI Batch API, as the bulk lane uses it: files in, a batch, files out.

This module owns the wire format of `POST /v1/files` (purpose `batch`), `GET /v1/files`,
`GET /v1/files/{id}/content`, `POST /v1/batches`, `GET /v1/batches` (paginated with
`after` and `limit`), `GET /v1/batches/{id}` and `POST /v1/batches/{id}/cancel`, after the
OpenAI API reference ("Batch", "Files"; developers.openai.com/api/reference):

* the input file is JSONL, one request per line: `{"custom_id", "method": "POST",
  "url": "/v1/images/generations", "body": {...}}`; up to 50,000 lines and 200 MB;
  a `custom_id` is unique within its file;
* a batch is created with `input_file_id`, `endpoint`, `completion_window` ("24h", the
  only one) and up to 16 `metadata` pairs (keys up to 64 characters, values up to 512);
* its `status` is validating, failed, in_progress, finalizing, completed, expired,
  cancelling or cancelled; a finished batch names an `output_file_id` (lines that got
  an answer) and an `error_file_id` (lines that did not), each line keyed by `custom_id`:
  `{"id", "custom_id", "response": {"status_code", "request_id", "body"}, "error"}`.

Every failure is classified by `http_classify.classify`, like a synchronous call's. None of
these calls is charged: only the lines a batch runs are, and `pipeline.batches` books them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Any, Iterator

import requests

from .http_classify import BadBody
from .http_endpoint import Answer, HttpEndpoint, Limits

IMAGES_ENDPOINT = "/v1/images/generations"
COMPLETION_WINDOW = "24h"
FINISHED = frozenset({"failed", "completed", "expired", "cancelled"})
METADATA_KEY = "mediapipe_batch"   # our batch's name, by which a batch whose create answer was lost is found
PAGE = 100                          # the largest page GET /v1/batches gives ("limit", 1 to 100)
FILE_CAP = 200 * 1024 * 1024        # the largest input file the API takes; output files are read with a cap
                                    # of MAX_BYTES per line


def request_line(custom_id: str, body: dict) -> bytes:
    """One line of an input file."""
    line = {"custom_id": custom_id, "method": "POST", "url": IMAGES_ENDPOINT, "body": body}
    return json.dumps(line, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


@dataclass(frozen=True)
class ResultLine:
    """One line of an output or error file: the answer (status and body) or the error of one request."""

    custom_id: str
    status_code: int | None
    body: Any
    request_id: str
    error: dict | None

    @classmethod
    def parse(cls, raw: bytes) -> "ResultLine":
        try:
            line = json.loads(raw)
            response = line.get("response") or {}
            return cls(str(line["custom_id"]), response.get("status_code"), response.get("body"),
                       str(response.get("request_id") or ""), line.get("error"))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise BadBody(f"a result line is not a Batch API result: {exc}") from exc


def result_lines(stream: IO[bytes]) -> Iterator[ResultLine]:
    for raw in stream:
        if raw.strip():
            yield ResultLine.parse(raw)


class BatchClient:
    """A base URL, a key and limits: the Batch API's calls, each bounded and classified."""

    def __init__(self, *, base_url: str, api_key: str, session: requests.Session, limits: Limits) -> None:
        self._http = HttpEndpoint(base_url, api_key, session, limits)

    def upload(self, name: str, content: IO[bytes]) -> dict:
        """POST /v1/files with purpose `batch`: the file object (its `id`)."""
        return self._http.request("POST", "/v1/files", _json, data={"purpose": "batch"},
                                  files={"file": (name, content, "application/jsonl")})

    def find_file(self, name: str) -> dict | None:
        """The newest uploaded batch file of this name, if any (GET /v1/files?purpose=batch)."""
        after = None
        while True:
            page = self._http.request("GET", "/v1/files", _json, params={
                "purpose": "batch", "limit": 10_000, "order": "desc", **({"after": after} if after else {})})
            for item in page.get("data") or []:
                if item.get("filename") == name:
                    return item
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page["data"][-1]["id"]

    def create(self, input_file_id: str, name: str) -> dict:
        """POST /v1/batches for the images endpoint, our batch's name in its metadata: the batch object."""
        return self._http.request("POST", "/v1/batches", _json, json={
            "input_file_id": input_file_id, "endpoint": IMAGES_ENDPOINT, "completion_window": COMPLETION_WINDOW,
            "metadata": {METADATA_KEY: name}})

    def find(self, name: str) -> dict | None:
        """The batch whose metadata names `name`, listing every page of GET /v1/batches; None if there is none."""
        after = None
        while True:
            page = self._http.request("GET", "/v1/batches", _json,
                                      params={"limit": PAGE, **({"after": after} if after else {})})
            for batch in page.get("data") or []:
                if (batch.get("metadata") or {}).get(METADATA_KEY) == name:
                    return batch
            if not page.get("has_more") or not page.get("data"):
                return None
            after = page.get("last_id") or page["data"][-1]["id"]

    def get(self, batch_id: str) -> dict:
        return self._http.request("GET", f"/v1/batches/{batch_id}", _json)

    def cancel(self, batch_id: str) -> dict:
        return self._http.request("POST", f"/v1/batches/{batch_id}/cancel", _json)

    def download(self, file_id: str, sink: IO[bytes], cap: int) -> None:
        """GET /v1/files/{id}/content into `sink`, at most `cap` bytes."""
        self._http.request("GET", f"/v1/files/{file_id}/content", lambda answer: None, sink=sink, cap=cap)


def _json(answer: Answer) -> dict:
    body = answer.json()
    if not isinstance(body, dict):
        raise BadBody("the answer is not a JSON object")
    return body
