"""The fake's Files and Batch API: uploads, batches that take time, expire, fail validation or answer per line.

What it refuses follows the OpenAI API reference ("Files" and "Batch", developers.openai.com/api/reference);
each rule says where:

* "Upload file": `purpose` is one of assistants, batch, fine-tune, vision, user_data, evals; a `batch`
  file is `.jsonl` and at most 200 MB.
* "Create batch": `input_file_id` names a file uploaded with purpose `batch`; `endpoint` is one of the
  listed endpoints (`/v1/audio/speech` is not among them); `completion_window` is `24h`, the only
  one; `metadata` has at most 16 pairs, keys of at most 64 characters, values of at most 512.
* "The request input object" / "Batch input file": each line has `custom_id`, `method` ("POST"), `url`
  (the batch's endpoint) and `body`; a `custom_id` is unique within the file; up to 50,000 requests.
  A file that breaks these fails validation: the batch's status becomes `failed`, with `errors.data`.
* "List batches": `limit` 1 to 100 (default 20), `after` a batch id; most recent first; `has_more`.

A batch's lines run when it is asked about after `seconds` have passed (FakeBatchScript): each line is
checked against the image contract like a synchronous call and executed (counted per `custom_id`, the
task's idempotency key, with the synchronous calls' counters), or refused in the error file.
`expire_after` lines, the batch `expired` with the rest of its lines in the error file
(`batch_expired`); `server_error_every` n-th line answers 500; `unusable_every` n-th line is run (and charged)
but answers bytes that are no image; a prompt containing `refuse_word` is
refused by the safety system (400 `moderation_blocked`), as it is on the synchronous endpoint;
`fail_validation` batches fail validation as a full enqueued-token quota fails them (the "Batch API"
guide's rate limits: a batch past the organization's enqueued-token limit is refused; the error seen in the
field, openai/openai-python#2084, is `token_limit_exceeded` with `line: null`, status `failed`).
"""

from __future__ import annotations

import base64
import itertools
import json
import threading
import time
from dataclasses import dataclass, field
from email.parser import BytesParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

from . import contract
from .media import tiny_image

PURPOSES = frozenset({"assistants", "batch", "fine-tune", "vision", "user_data", "evals"})
BATCH_ENDPOINTS = frozenset({"/v1/responses", "/v1/chat/completions", "/v1/embeddings", "/v1/completions",
                             "/v1/moderations", "/v1/images/generations", "/v1/images/edits", "/v1/videos"})
MAX_FILE_BYTES = 200 * 1024 * 1024
MAX_REQUESTS = 50_000
MAX_METADATA = 16
# Image tokens an answer reports at 1024x1024, by quality (gpt-image-2's, as OpenAI's cost calculator bills them);
# another size by its area.
OUTPUT_TOKENS = {"low": 200, "medium": 1767, "high": 7024}
TEXT_OUTPUT_TOKENS = 24   # the GPT image models' answers also report some text tokens out


@dataclass
class FakeBatchScript:
    """How the fake's batches behave."""

    seconds: float = 0.2                 # from create to completed
    expire_after: int | None = None      # lines run before the batch expires (None: it completes)
    server_error_every: int | None = None   # every n-th line answers 500 (None: none)
    unusable_every: int | None = None    # every n-th line is run (and charged) but answers bytes that are no image
    refuse_word: str = "FORBIDDEN"       # a prompt containing it is refused by the safety system
    fail_validation: int = 0             # the next n batches fail validation (the organization's queue is full)


@dataclass
class _Batch:
    obj: dict
    lines: list = field(default_factory=list)


def usage(body: dict) -> dict:
    """The `usage` block of a GPT image answer: its prompt's tokens in; out, the image's tokens and a few text
    tokens, apart (`output_tokens_details`, as the API reports them now)."""
    text = max(1, len(body.get("prompt", "")) // 4)
    quality = body.get("quality", "auto")
    quality = "high" if quality == "auto" else quality
    width, _, height = str(body.get("size", "1024x1024")).partition("x")
    area = int(width) * int(height) if width.isdigit() and height.isdigit() else 1024 * 1024
    image = round(OUTPUT_TOKENS.get(quality, OUTPUT_TOKENS["high"]) * area / (1024 * 1024))
    return {"input_tokens": text, "input_tokens_details": {"text_tokens": text, "image_tokens": 0},
            "output_tokens": image + TEXT_OUTPUT_TOKENS,
            "output_tokens_details": {"text_tokens": TEXT_OUTPUT_TOKENS, "image_tokens": image},
            "total_tokens": text + image + TEXT_OUTPUT_TOKENS}


def moderation(word: str, body: Any) -> contract.Refusal | None:
    if word and isinstance(body, dict) and word in str(body.get("prompt", "")):
        return contract.error(400, "Your request was rejected as a result of our safety system.",
                              code="moderation_blocked")
    return None


class BatchAPI:
    """Files and batches, in memory; `execute(custom_id)` counts a line's execution with the fake's counters."""

    def __init__(self, execute) -> None:
        self._execute = execute
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.files: dict[str, dict] = {}
        self.contents: dict[str, bytes] = {}
        self.batches: dict[str, _Batch] = {}
        self.script = FakeBatchScript()
        self.created = 0

    def _id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids):06d}"

    # files -----------------------------------------------------------------------------------------

    def upload(self, purpose: str | None, filename: str, data: bytes) -> tuple[int, dict]:
        if purpose not in PURPOSES:
            return contract.error(400, f"Invalid value for 'purpose': {purpose!r}.", param="purpose",
                                  code="invalid_value")
        if purpose == "batch" and not filename.endswith(".jsonl"):
            return contract.error(400, "Invalid file format for Batch API. Must be .jsonl", param="file")
        if len(data) > MAX_FILE_BYTES:
            return contract.error(400, "File is too large.", param="file", code="file_too_large")
        with self._lock:
            file = {"id": self._id("file"), "object": "file", "bytes": len(data), "created_at": int(time.time()),
                    "filename": filename, "purpose": purpose, "status": "processed"}
            self.files[file["id"]] = file
            self.contents[file["id"]] = data
        return 200, file

    def list_files(self, purpose: str | None) -> tuple[int, dict]:
        with self._lock:
            data = [f for f in reversed(self.files.values()) if purpose in (None, f["purpose"])]
        return 200, {"object": "list", "data": data, "has_more": False}

    def content(self, file_id: str) -> tuple[int, bytes] | tuple[int, dict]:
        with self._lock:
            if file_id not in self.contents:
                return contract.error(404, f"No such File object: {file_id}", param="id")
            return 200, self.contents[file_id]

    # batches ---------------------------------------------------------------------------------------

    def create(self, body: Any) -> tuple[int, dict]:
        if not isinstance(body, dict):
            return contract.error(400, "We could not parse the JSON body of your request.")
        refusal = self._refuse_create(body)
        if refusal:
            return refusal
        now = int(time.time())
        with self._lock:
            batch = {"id": self._id("batch"), "object": "batch", "endpoint": body["endpoint"], "errors": None,
                     "input_file_id": body["input_file_id"], "completion_window": "24h", "status": "validating",
                     "output_file_id": None, "error_file_id": None, "created_at": now, "in_progress_at": None,
                     "expires_at": now + 86_400, "completed_at": None, "failed_at": None, "expired_at": None,
                     "cancelling_at": None, "cancelled_at": None,
                     "request_counts": {"total": 0, "completed": 0, "failed": 0},
                     "metadata": body.get("metadata") or {}}
            self.batches[batch["id"]] = _Batch(batch)
            self.created += 1
            self._validate(self.batches[batch["id"]])
            return 200, dict(batch)

    def _refuse_create(self, body: dict) -> contract.Refusal | None:
        for name in ("input_file_id", "endpoint", "completion_window"):
            if not isinstance(body.get(name), str):
                return contract.error(400, f"Missing required parameter: '{name}'.", param=name,
                                      code="missing_required_parameter")
        if body["endpoint"] not in BATCH_ENDPOINTS:
            return contract._invalid("endpoint", body["endpoint"], BATCH_ENDPOINTS)
        if body["completion_window"] != "24h":
            return contract._invalid("completion_window", body["completion_window"], frozenset({"24h"}))
        metadata = body.get("metadata") or {}
        if not isinstance(metadata, dict) or len(metadata) > MAX_METADATA or any(
                not isinstance(k, str) or len(k) > 64 or not isinstance(v, str) or len(v) > 512
                for k, v in metadata.items()):
            return contract.error(400, "Invalid 'metadata': at most 16 pairs, keys up to 64 characters, values up "
                                       "to 512.", param="metadata", code="invalid_value")
        file = self.files.get(body["input_file_id"])
        if file is None:
            return contract.error(400, f"Invalid 'input_file_id': '{body['input_file_id']}'. File not found.",
                                  param="input_file_id", code="invalid_value")
        if file["purpose"] != "batch":
            return contract.error(400, "The input file must be uploaded with the purpose 'batch'.",
                                  param="input_file_id", code="invalid_value")
        return None

    def _validate(self, batch: _Batch) -> None:
        """The input file's lines, or the errors that fail the batch (called under the lock)."""
        errors, seen = [], set()
        raw_lines = [line for line in self.contents[batch.obj["input_file_id"]].splitlines() if line.strip()]
        if len(raw_lines) > MAX_REQUESTS:
            errors.append({"code": "too_many_requests", "message": f"at most {MAX_REQUESTS} requests", "line": None})
        for number, raw in enumerate(raw_lines, 1):
            try:
                line = json.loads(raw)
                custom_id, method, url, body = line["custom_id"], line["method"], line["url"], line["body"]
            except (ValueError, KeyError, TypeError):
                errors.append({"code": "invalid_json_line", "message": "not a request line", "line": number})
                continue
            if custom_id in seen:
                errors.append({"code": "duplicate_custom_id",
                               "message": f"The custom_id {custom_id!r} is a duplicate.", "line": number})
            if method != "POST" or url != batch.obj["endpoint"]:
                errors.append({"code": "mismatched_url",
                               "message": f"The line's url {url!r} is not the batch's endpoint", "line": number})
            seen.add(custom_id)
            batch.lines.append((custom_id, body))
        if self.script.fail_validation > 0:
            self.script.fail_validation -= 1
            errors.append({"code": "token_limit_exceeded", "line": None,
                           "message": "Enqueued token limit reached for gpt-image-2.6-sunburst in organization org-fake."})
        if errors:
            batch.obj.update(status="failed", failed_at=int(time.time()),
                             errors={"object": "list", "data": errors[:50]})
        else:
            batch.obj.update(status="in_progress", in_progress_at=int(time.time()))
            batch.obj["request_counts"]["total"] = len(batch.lines)

    def get(self, batch_id: str) -> tuple[int, dict]:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return contract.error(404, f"No batch found with id '{batch_id}'.", param="batch_id")
            self._advance(batch)
            return 200, dict(batch.obj)

    def list(self, limit: Any, after: str | None) -> tuple[int, dict]:
        try:
            limit = 20 if limit is None else int(limit)
        except ValueError:
            limit = 0
        if not 1 <= limit <= 100:
            return contract.error(400, "Invalid 'limit': must be between 1 and 100.", param="limit",
                                  code="invalid_value")
        with self._lock:
            ordered = list(reversed(self.batches.values()))   # most recent first
            ids = [b.obj["id"] for b in ordered]
            start = ids.index(after) + 1 if after in ids else 0
            page = [dict(b.obj) for b in ordered[start:start + limit]]
        return 200, {"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                     "last_id": page[-1]["id"] if page else None, "has_more": start + limit < len(ordered)}

    def cancel(self, batch_id: str) -> tuple[int, dict]:
        with self._lock:
            batch = self.batches.get(batch_id)
            if batch is None:
                return contract.error(404, f"No batch found with id '{batch_id}'.", param="batch_id")
            if batch.obj["status"] in ("validating", "in_progress", "finalizing"):
                batch.obj.update(status="cancelling", cancelling_at=int(time.time()))
            return 200, dict(batch.obj)

    def _advance(self, batch: _Batch) -> None:
        """Run the batch's lines once its time has come (called under the lock)."""
        status = batch.obj["status"]
        if status == "cancelling":
            self._finish(batch, "cancelled", run=0)
        elif status == "in_progress" and time.time() - batch.obj["created_at"] >= self.script.seconds:
            limit = self.script.expire_after
            self._finish(batch, "completed" if limit is None or limit >= len(batch.lines) else "expired",
                         run=len(batch.lines) if limit is None else min(limit, len(batch.lines)))

    def _finish(self, batch: _Batch, status: str, run: int) -> None:
        out, err = [], []
        for number, (custom_id, body) in enumerate(batch.lines, 1):
            if number > run:
                if status == "expired":
                    err.append({"id": self._id("batch_req"), "custom_id": custom_id, "response": None,
                                "error": {"code": "batch_expired",
                                          "message": "This request could not be executed before the completion "
                                                     "window expired."}})
                continue
            refusal = contract.refuse_image(body) or moderation(self.script.refuse_word, body)
            every = self.script.server_error_every
            if refusal is None and every and number % every == 0:
                refusal = contract.error(500, "The server had an error processing your request.",
                                         kind="server_error")
            if refusal is not None:
                err.append({"id": self._id("batch_req"), "custom_id": custom_id,
                            "response": {"status_code": refusal[0], "request_id": self._id("req"),
                                         "body": refusal[1]}, "error": None})
                continue
            number_executed = self._execute(custom_id)
            image = tiny_image(number_executed, body.get("output_format", "png"))
            if self.script.unusable_every and number % self.script.unusable_every == 0:
                image = b"not an image at all"
            answer = {"created": int(time.time()), "data": [{"b64_json": base64.b64encode(image).decode()}],
                      "usage": usage(body)}
            out.append({"id": self._id("batch_req"), "custom_id": custom_id,
                        "response": {"status_code": 200, "request_id": self._id("req"), "body": answer},
                        "error": None})
        now = int(time.time())
        batch.obj.update(status=status, **{f"{status}_at": now})
        batch.obj["request_counts"].update(completed=len(out), failed=len(err))
        for name, rows in (("output_file_id", out), ("error_file_id", err)):
            if rows:
                file_id = self._id("file")
                data = b"".join(json.dumps(r).encode() + b"\n" for r in rows)
                self.files[file_id] = {"id": file_id, "object": "file", "bytes": len(data), "created_at": now,
                                       "filename": f"{batch.obj['id']}_{name}.jsonl", "purpose": "batch_output",
                                       "status": "processed"}
                self.contents[file_id] = data
                batch.obj[name] = file_id


def route(api: BatchAPI, method: str, path: str, headers, raw: bytes) -> tuple[str | None, tuple]:
    """The Files or Batch API call an HTTP request makes: its step's name and its answer."""
    parts = urlsplit(path)
    query = {k: v[0] for k, v in parse_qs(parts.query).items()}
    segments = parts.path.strip("/").split("/")[1:]   # after "v1"
    if segments == ["files"] and method == "POST":
        fields = _multipart(headers.get("Content-Type", ""), raw)
        if "file" not in fields:
            return "files.create", contract.error(400, "Missing required parameter: 'file'.", param="file")
        filename, data = fields["file"]
        return "files.create", api.upload(fields.get("purpose", (None, b""))[1].decode() or None, filename, data)
    if segments == ["files"] and method == "GET":
        return "files.list", api.list_files(query.get("purpose"))
    if len(segments) == 3 and segments[0] == "files" and segments[2] == "content" and method == "GET":
        return "files.content", api.content(segments[1])
    if segments == ["batches"] and method == "POST":
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        return "batches.create", api.create(body)
    if segments == ["batches"] and method == "GET":
        return "batches.list", api.list(query.get("limit"), query.get("after"))
    if len(segments) == 2 and segments[0] == "batches" and method == "GET":
        return "batches.get", api.get(segments[1])
    if len(segments) == 3 and segments[0] == "batches" and segments[2] == "cancel" and method == "POST":
        return "batches.cancel", api.cancel(segments[1])
    return None, contract.refuse_path(method, path)


def _multipart(content_type: str, raw: bytes) -> dict[str, tuple[str | None, bytes]]:
    """The fields of a multipart/form-data body: name -> (file name, bytes)."""
    if not content_type.startswith("multipart/form-data"):
        return {}
    message = BytesParser().parsebytes(f"Content-Type: {content_type}\r\n\r\n".encode() + raw)
    fields = {}
    for part in message.get_payload() if message.is_multipart() else []:
        name = part.get_param("name", header="content-disposition")
        if name:
            fields[name] = (part.get_filename(), part.get_payload(decode=True) or b"")
    return fields
