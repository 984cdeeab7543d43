"""The OpenAPI 3.1 document of the HTTP API, served at /api/openapi.json.

Kept true by tests/integration/web/test_openapi.py: every route of the api, media, metrics and
health blueprints is described here with its methods, and nothing else is. It is also the API's contract:
web.contract refuses every request that breaks a constraint of its parameters or body, and
tests/integration/web/test_fuzz.py runs Schemathesis over it against the app served by gunicorn (every answer's
status documented, no 5xx, no invalid request accepted, no valid one refused but for the rules JSON Schema cannot
state: schemathesis.toml).
"""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from pipeline import attention
from pipeline.core.content import MAX_BLOCKS, MAX_PROMPT, MAX_TEXT, MAX_TITLE
from pipeline.core.outcome import Reason
from pipeline.core.records import MAX_NOTE
from pipeline.core.rerun import MAX_EXTENSION_SECONDS
from pipeline.core import kinds
from pipeline.demo import SCENARIOS, themes
from web.inputs import MAX_BODY_BYTES, MAX_ID, MAX_OFFSET, MAX_QUERY, MAX_ROW_ID, MAX_VERSION

bp = Blueprint("openapi", __name__)

JSON = "application/json"
ERROR_TEXT = {400: "Malformed request (invalid JSON, or JSON nested more than 32 levels, or a bad Idempotency-Key)",
              401: "Missing, unknown or revoked X-API-Key",
              403: "The key's role does not allow this", 404: "No such resource",
              409: "The current state forbids this; `error.code` says why",
              413: f"Body larger than {MAX_BODY_BYTES // 1024 // 1024} MiB",
              422: "Invalid input: a parameter or field breaks a rule of this document (or one it cannot state, "
                   "named in the description); `error.field` names the part to fix; nothing was changed",
              429: "This key's own limit (pending tasks, saves per minute, daily spend); nothing was changed; "
                   "see Retry-After",
              503: "Over capacity, or the database unreachable or busy; nothing was changed; see Retry-After"}
# answered by the HTTP server (gunicorn) before the app sees the request, as a small HTML page
SERVER_TEXT = {414: "The request line (path and query) is longer than the server reads (gunicorn: 4094 bytes)",
               431: "A request header is longer than the server reads (gunicorn: 8190 bytes)"}


def ref(name: str) -> dict:
    return {"$ref": f"#/components/schemas/{name}"}


def body(schema: dict, text: str = "OK", headers: dict | None = None) -> dict:
    answer = {"description": text, "content": {JSON: {"schema": schema}}}
    if headers:
        answer["headers"] = headers
    return answer


def errors(*codes: int) -> dict:
    found = {}
    for code in codes:
        headers = {"Retry-After": {"schema": {"type": "integer"}}} if code in (429, 503) else None
        found[str(code)] = body(ref("Error"), ERROR_TEXT[code], headers)
    return found


def server_answers() -> dict:
    return {str(code): {"description": text, "content": {"text/html": {"schema": {"type": "string"}}}}
            for code, text in SERVER_TEXT.items()}


def op(summary: str, responses: dict, *, auth: bool = True, request: dict | None = None,
       params: list | None = None, tag: str = "contents", body_required: bool = True) -> dict:
    """An operation; every one may be answered 414 and 431 by the server, every keyed one 401, 403 and 503 (the
    key is looked up in the database), every one with a body 400, 413 and 422."""
    common = {**server_answers(), **(errors(401, 403, 503) if auth else {}),
              **(errors(400, 413, 422) if request else {})}
    doc = {"summary": summary, "tags": [tag], "responses": {**common, **responses}}
    if auth:
        doc["security"] = [{"apiKey": []}]
    if request:
        doc["requestBody"] = {"required": body_required, "content": {JSON: {"schema": request}}}
    if params:
        doc["parameters"] = params
    return doc


def path_param(name: str, maximum: int) -> dict:
    return {"name": name, "in": "path", "required": True,
            "schema": {"type": "integer", "minimum": 1, "maximum": maximum}}


CONTENT = path_param("content_id", MAX_ROW_ID)
VERSION = path_param("version", 999_999_999)
TASK = path_param("task_id", MAX_ROW_ID)
LOCATION = {"Location": {"schema": {"type": "string"}}}
IDEMPOTENCY = {"name": "Idempotency-Key", "in": "header", "required": False,
               "schema": {"type": "string", "minLength": 1, "maxLength": 200, "pattern": "^[!-~]+$"}}
OBJECT = {"type": "object"}
NULLABLE_TIME = {"type": ["string", "null"], "format": "date-time"}
# Text a request may send: no NUL, which PostgreSQL's text cannot hold (nor an unpaired surrogate, which no UTF-8
# string holds and a regular expression therefore cannot name). TEXT, a field that is required, also holds more
# than the spaces the API strips around it: SPACES are the characters Python's str.strip() removes, spelt out,
# because \s means another set in the ECMA-262 expressions of JSON Schema.
SPACES = r"\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
STORABLE = r"^[^\x00]*$"
TEXT = rf"^[{SPACES}]*[^{SPACES}\x00][^\x00]*$"


def text_field(limit: int, *, nullable: bool = False, **more: object) -> dict:
    if nullable:
        return {"type": ["string", "null"], "maxLength": limit, "pattern": STORABLE, **more}
    return {"type": "string", "minLength": 1, "maxLength": limit, "pattern": TEXT, **more}


def request_object(required: list[str], properties: dict) -> dict:
    """A request body: these fields and no others (a misspelt field is refused, never silently ignored)."""
    return {"type": "object", "required": required, "properties": properties, "additionalProperties": False}


CONTENT_FIELDS = {
    "title": text_field(MAX_TITLE),
    "locale": {"type": "string", "pattern": "^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$", "maxLength": 35,
               "examples": ["zh-CN", "en-US"], "description": "a language tag"},
    "theme": text_field(100, nullable=True),
    "blocks": {"type": "array", "minItems": 1, "maxItems": MAX_BLOCKS, "items": ref("Block"),
               "description": "block keys must be unique (422 naming the second)"},
    "priority": {"enum": ["interactive", "bulk"], "default": "interactive",
                 "description": "bulk: an import's work, done after editors' work, contents taking turns"}}
TASK_IDS = {"type": "array", "minItems": 1, "maxItems": 200,
            "items": {"type": "integer", "minimum": 1, "maximum": MAX_ID}}

SCHEMAS = {
    "Error": {"type": "object", "required": ["error"], "properties": {"error": {
        "type": "object", "required": ["code", "message"],
        "properties": {"code": {"type": "string"}, "message": {"type": "string"}, "field": {"type": "string"},
                       "details": OBJECT}}}},
    "Block": request_object(["key", "text"], {
        "key": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$"},
        "text": text_field(MAX_TEXT), "image_prompt": text_field(MAX_PROMPT, nullable=True),
        "regeneration": {"type": "object", "readOnly": True,
                         "description": "a regenerated block's mark, as reads show it; ignored when sent back"}}),
    "Accepted": {"type": "object", "required": ["content_id", "version", "status_url"], "properties": {
        "content_id": {"type": "integer"}, "version": {"type": "integer"}, "status_url": {"type": "string"},
        "status": ref("VersionStatus"), "content_url": {"type": "string"}, "board_url": {"type": "string"},
        "priority": {"enum": ["interactive", "bulk"]},
        "priority_reason": {"type": "string", "description": "why the save runs in another lane than it asked for"}}},
    "VersionStatus": {"enum": ["in_progress", "cancelling", "complete", "needs_decision", "failed", "cancelled",
                               "superseded"]},
    "Progress": {"type": "object", "properties": {"total": {"type": "integer"}, "succeeded": {"type": "integer"},
                                                  "percent": {"type": "integer"}, "counts": OBJECT}},
    "ContentList": {"type": "object", "properties": {"items": {"type": "array", "items": OBJECT},
                                                     "total": {"type": "integer"},
                                                     "next_before": {"type": ["integer", "null"]}}},
    "Content": {"type": "object", "properties": {"id": {"type": "integer"}, "title": {"type": "string"},
                                                 "current_version": {"type": "integer"},
                                                 "approved_version": {"type": ["integer", "null"]},
                                                 "versions": {"type": "array", "items": OBJECT}}},
    "Task": {"type": "object", "properties": {
        "id": {"type": "integer"}, "kind": {"enum": list(kinds.names())}, "block": {"type": ["string", "null"]},
        "status": {"type": "string"}, "attempts": {"type": "integer"}, "max_attempts": {"type": "integer"},
        "terminal": {"type": "boolean", "description": "failed, succeeded, superseded or cancelled: the task changes "
                                                       "no more unless a person retries it"},
        "next_attempt_at": NULLABLE_TIME, "last_error": {"type": ["string", "null"]},
        "last_error_code": {"enum": [*(reason.value for reason in Reason), None],
                            "description": "why the decision that recorded last_error was made"},
        "waiting_for": {"enum": ["input", "slot", "budget", "storage", None],
                        "description": "what a task in retry waits for, spending no attempt: another task making the "
                                       "same input, a free call slot, the budget, the media store"},
        "sha256": {"type": ["string", "null"]}, "asset_url": {"type": ["string", "null"]},
        "events": {"type": "array", "items": OBJECT}}},
    "Version": {"type": "object", "properties": {
        "content_id": {"type": "integer"}, "version": {"type": "integer"}, "status": ref("VersionStatus"),
        "terminal": {"type": "boolean", "description": "complete, failed, cancelled or superseded: nothing moves on "
                                                       "without a person's action (needs_decision is not terminal: "
                                                       "the reconciler may still settle an unknown outcome)"},
        "progress": ref("Progress"),
        "tasks": {"type": "array", "items": ref("Task")}, "approvable": {"type": "boolean"},
        "approval_blockers": {"type": "array", "items": {"type": "string"}}, "spend": OBJECT}},
    "TaskTimeline": {"allOf": [ref("Task"), {"type": "object", "properties": {
        "lease": {"type": ["object", "null"], "description": "while running: the worker (host:pid) holding the "
                  "lease, lease_until and the last heartbeat", "properties": {
                      "holder": {"type": ["string", "null"]}, "until": NULLABLE_TIME, "heartbeat_at": NULLABLE_TIME}},
        "unmet_dependencies": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "kind": {"type": "string"}, "status": {"type": "string"}}}},
        "diagnosis": {"type": "object", "description": "why the task is where it is, in one line (docs/runbook.md)",
                      "properties": {"code": {"type": "string"}, "params": OBJECT, "text": {"type": "string"}}},
        "calls": {"type": "array", "items": OBJECT}, "receipts": {"type": "array", "items": OBJECT},
        "runs": {"type": "array", "items": OBJECT, "description": "the first run, then one per rerun, each with "
                                                                  "the dead letter that ended it"}}}]},
    "Approval": {"type": "object", "properties": {"content_id": {"type": "integer"}, "version": {"type": "integer"},
                                                  "approved_at": {"type": "string"}, "approved_by": {"type": "string"}}},
    "Cancelled": {"type": "object", "properties": {"cancelled_now": {"type": "integer"},
                                                   "status_url": {"type": "string"}}},
    "RetryInput": request_object([], {"accept_duplicate_risk": {
        "type": "boolean", "description": "required (true) to retry an unknown task: it may be charged twice"}}),
    "RetryAccepted": {"type": "object", "properties": {"task_id": {"type": "integer"}, "status": {"type": "string"},
                                                       "attempts": {"type": "integer"},
                                                       "max_attempts": {"type": "integer"}}},
    "RerunInput": request_object(["why"], {
        "why": text_field(MAX_NOTE, description="kept with the dead letter"),
        "extend_deadline_seconds": {"type": "integer", "minimum": 1, "maximum": MAX_EXTENSION_SECONDS,
                                    "description": "move the deadline to this long from now; left out, it stays"}}),
    "RerunAccepted": {"type": "object", "properties": {
        "task_id": {"type": "integer"}, "rerun_id": {"type": "integer"},
        "rerun_of": {"type": "integer", "description": "the dead letter of the run this rerun repeats"},
        "status": {"type": "string"}, "first_attempt": {"type": "integer"}, "max_attempts": {"type": "integer"},
        "deadline_before": {"type": "string"}, "deadline_after": {"type": "string"}}},
    "ResolveInput": request_object(["outcome", "note"], {"outcome": {"const": "failed"}, "note": text_field(MAX_NOTE)}),
    "Resolved": {"type": "object", "properties": {"task_id": {"type": "integer"}, "status": {"type": "string"}}},
    "Delivery": {"type": "object", "properties": {
        "content_id": {"type": "integer"}, "version": {"type": "integer"}, "title": {"type": "string"},
        "blocks": {"type": "array", "items": OBJECT}, "bundle": OBJECT,
        "urls_expire_at": {"type": "string", "format": "date-time",
                           "description": "when the signed media links of this manifest stop working"}}},
    "Spend": {"type": "object", "properties": {
        "scope": {"type": "string"}, "content_id": {"type": ["integer", "null"]},
        "providers": {"type": "array", "items": {"type": "object", "properties": {
            "provider": {"type": "string"}, "spent_today": {"type": "number"}, "calls_today": {"type": "integer"},
            "daily_budget": {"type": ["number", "null"]}, "budget_reached": {"type": "boolean"}}}},
        "content_budget": {"type": ["number", "null"]}, "paused_by_budget": OBJECT,
        "ledger": {"type": "array", "items": OBJECT}, "totals": OBJECT,
        "duplicates": {"type": "array", "description": "paid calls for an input already paid for, with consented_by "
                                                       "(null: nobody accepted the risk)", "items": OBJECT}}},
    "JobInput": request_object(["theme"], {
        "theme": {"enum": themes(), "description": "a built-in lesson, by its Chinese or English name"},
        "scenario": {"enum": list(SCENARIOS)},
        "locale": {"enum": ["zh-CN", "en-US"], "description": "left out: the theme's own language"}}),
    "NoteInput": request_object(["note"], {"note": text_field(MAX_NOTE, description="why; kept on the history")}),
    "Decision": {"type": "object", "properties": {
        "content_id": {"type": "integer"}, "version": {"type": "integer"},
        "decision": {"enum": ["rejected", "changes_requested"]}, "note": {"type": "string"}, "by": {"type": "string"}}},
    "Withdrawn": {"type": "object", "properties": {
        "content_id": {"type": "integer"}, "version": {"type": "integer"}, "withdrawn_by": {"type": "string"},
        "note": {"type": "string"}, "delivery_url": {"type": "string"}}},
    "RegenerateInput": {**request_object([], {
        "accept_new_charge": {"type": "boolean", "description": "true: a new paid call is made although the same "
                                                                "input has an asset (without: 409 "
                                                                "new_charge_unconfirmed, with the estimated cost)"},
        "reason": text_field(MAX_NOTE, description="why; required with accept_new_charge: true")}),
        "if": {"required": ["accept_new_charge"], "properties": {"accept_new_charge": {"const": True}}},
        "then": {"required": ["reason"]}},
    "Regenerated": {"allOf": [ref("Accepted"), {"type": "object", "properties": {
        "task_id": {"type": "integer"}, "replaced_task_id": {"type": "integer"},
        "replaced_sha256": {"type": "string"}, "estimated_cost": {"type": "number"}}}]},
    "Comparison": {"type": "object", "properties": {
        "from_version": {"type": "integer"}, "to_version": {"type": "integer"},
        "changed_fields": OBJECT, "block_counts": OBJECT, "media_counts": OBJECT, "cost": OBJECT,
        "blocks": {"type": "array", "items": {"type": "object", "properties": {
            "key": {"type": "string"}, "change": {"enum": ["added", "removed", "changed", "unchanged"]},
            "text_diff": {"type": "array", "items": {"type": "object", "properties": {
                "op": {"enum": ["equal", "delete", "insert"]}, "text": {"type": "string"}}}}}}},
        "media": {"type": "array", "items": {"type": "object", "properties": {
            "block": {"type": "string"}, "kind": {"enum": ["image", "tts"]},
            "change": {"enum": ["reused", "new", "superseded"]}, "regenerated": {"type": "boolean"},
            "from": {"type": ["object", "null"]}, "to": {"type": ["object", "null"]}}}}}},
    "Attention": {"type": "object", "properties": {
        "items": {"type": "array", "items": {"type": "object", "properties": {
            "id": {"type": "integer"}, "problem": {"enum": list(attention.PROBLEMS)},
            "actions": {"type": "array", "items": {"enum": ["retry_with_consent", "resolve_failed", "retry",
                                                             "cancel_version"]}}}}},
        "counts": OBJECT, "total": {"type": "integer"}}},
    "BulkRetryInput": request_object(["task_ids"], {
        "task_ids": TASK_IDS,
        "note": {"type": "string", "maxLength": MAX_NOTE, "pattern": STORABLE, "description": "not used by a retry"}}),
    "BulkResolveInput": request_object(["task_ids", "note"], {
        "task_ids": TASK_IDS, "note": text_field(MAX_NOTE, description="why they are closed as failed")}),
    "BulkLane": {"type": "object", "required": ["lane", "paused", "waiting"], "properties": {
        "lane": {"const": "bulk"}, "paused": {"type": "boolean"}, "paused_at": NULLABLE_TIME,
        "paused_by": {"type": ["string", "null"]},
        "waiting": {"type": "integer", "description": "the lane's tasks waiting for a worker"},
        "tasks_moved": {"type": "integer", "description": "after a resume: waiting tasks whose deadline moved on"}}},
    "BulkResult": {"type": "object", "properties": {
        "done": {"type": "array", "items": {"type": "integer"}},
        "refused": {"type": "array", "items": {"type": "object", "properties": {
            "task_id": {"type": "integer"}, "code": {"type": "string"}, "message": {"type": "string"}}}}}},
}


def query(name: str, schema: dict, text: str) -> dict:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": text}


PAGING = [query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}, "items per page"),
          query("offset", {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET, "default": 0}, "items to skip")]
ROW_ID = {"type": "integer", "minimum": 1, "maximum": MAX_ROW_ID}
VERSION_NUMBER = {"type": "integer", "minimum": 1, "maximum": MAX_VERSION}


def review_paths() -> dict:
    """The review workflow: compare, decisions, regenerate, the attention list."""
    version = [CONTENT, VERSION]
    decision = {"200": body(ref("Decision")), **errors(400, 404, 409, 422)}
    return {
        "/api/contents/{content_id}/compare": {"get": op(
            "Two versions side by side: blocks added, removed, changed (text diff), media reused, new or superseded, "
            "each side's cost", {"200": body(ref("Comparison")), **errors(404, 409, 422)}, params=[
                CONTENT, query("from", VERSION_NUMBER, "default: the version before `to` (409 when `to` is 1)"),
                query("to", VERSION_NUMBER, "default: the current version")])},
        "/api/contents/{content_id}/versions/{version}/reject": {"post": op(
            "Reject a version with a note (reviewer; 409 for the approved version)", decision, params=version,
            request=ref("NoteInput"))},
        "/api/contents/{content_id}/versions/{version}/request-changes": {"post": op(
            "Ask for changes to a version with a note (reviewer; 409 for the approved version)", decision,
            params=version, request=ref("NoteInput"))},
        "/api/contents/{content_id}/versions/{version}/withdraw": {"post": op(
            "Withdraw the approval of the approved version (reviewer): delivery answers 409 with the note",
            {"200": body(ref("Withdrawn")), **errors(400, 404, 409, 422)}, params=version, request=ref("NoteInput"))},
        "/api/tasks/{task_id}/regenerate": {"post": op(
            "Regenerate a succeeded image or narration: a new paid call in a new version, recorded",
            {"202": body(ref("Regenerated"), "Accepted: poll the Location", LOCATION),
             **errors(400, 404, 409, 422, 429, 503)}, params=[TASK], tag="tasks", request=ref("RegenerateInput"),
            body_required=False)},
        "/api/attention": {"get": op(
            "Tasks that need a person across all contents, with the actions each allows",
            {"200": body(ref("Attention")), **errors(422)}, tag="tasks", params=[
                query("problem", {"enum": list(attention.PROBLEMS)}, "only this problem"),
                query("kind", {"enum": list(kinds.names())}, "only this kind"),
                query("content_id", ROW_ID, "only this content"), *PAGING])},
        "/api/attention/retry": {"post": op(
            "Retry failed tasks in bulk, all or none (503 over capacity); unknown ones are refused (needs_consent)",
            {"200": body(ref("BulkResult")), **errors(429)}, tag="tasks", request=ref("BulkRetryInput"))},
        "/api/attention/resolve": {"post": op(
            "Close unknown tasks as failed in bulk, with one note", {"200": body(ref("BulkResult"))},
            tag="tasks", request=ref("BulkResolveInput"))},
        "/api/lanes/bulk": {"get": op(
            "Whether the bulk lane (imports) is paused, and how many of its tasks wait",
            {"200": body(ref("BulkLane"))}, tag="tasks")},
        "/api/lanes/bulk/pause": {"post": op(
            "Pause the bulk lane (admin): no bulk task is claimed or sent, running calls finish, bulk saves are "
            "still accepted and wait, no waiting bulk task fails for its deadline (409 already_paused)",
            {"200": body(ref("BulkLane")), **errors(409)}, tag="tasks")},
        "/api/lanes/bulk/resume": {"post": op(
            "Resume the bulk lane (admin): its waiting tasks' deadlines move on by the pause's length "
            "(409 not_paused)", {"200": body(ref("BulkLane")), **errors(409)}, tag="tasks")},
    }


def paths() -> dict:
    content, version, task = [CONTENT], [CONTENT, VERSION], [TASK]
    accepted = {"202": body(ref("Accepted"), "Accepted: poll the Location", LOCATION)}
    return {
        "/api/contents": {
            "get": op("List content items with progress, newest first; `q` searches titles and text",
                      {"200": body(ref("ContentList")), **errors(422)},
                      params=[query("q", {"type": "string", "maxLength": MAX_QUERY, "pattern": STORABLE},
                                    "words in the title or the current version's text"), *PAGING,
                              query("before", ROW_ID,
                                    "keyset paging: the items older than this id (next_before of the page before)")]),
            "post": op("Create a content item (version 1)", {**accepted, **errors(400, 413, 422, 429, 503)},
                       request=ref("ContentInput"), params=[IDEMPOTENCY])},
        "/api/contents/{content_id}": {
            "get": op("A content item and its versions", {"200": body(ref("Content")), **errors(404)}, params=content),
            "put": op("Save a new version on top of base_version",
                      {**accepted, **errors(400, 404, 409, 413, 422, 429, 503)}, request=ref("ContentUpdate"),
                      params=[CONTENT, IDEMPOTENCY])},
        "/api/contents/{content_id}/versions/{version}": {
            "get": op("A version: tasks, events, progress, spend", {"200": body(ref("Version")), **errors(404)},
                      params=version)},
        "/api/contents/{content_id}/versions/{version}/approve": {
            "post": op("Approve a complete version (reviewer)",
                       {"200": body(ref("Approval")), **errors(400, 404, 409, 413)}, params=version)},
        "/api/contents/{content_id}/versions/{version}/cancel": {
            "post": op("Cancel a version's unfinished work (409 when nothing is left to cancel)",
                       {"202": body(ref("Cancelled"), "Accepted", LOCATION), **errors(400, 404, 409, 413)},
                       params=version)},
        "/api/contents/{content_id}/delivery": {
            "get": op("The manifest of the approved version", {"200": body(ref("Delivery")), **errors(404, 409)},
                      params=content)},
        "/api/contents/{content_id}/spend": {
            "get": op("A content's spend over all its versions: calls, reuses, duplicates and who consented",
                      {"200": body(ref("Spend")), **errors(404)}, params=content)},
        "/api/spend": {
            "get": op("Today's spend: bookings against each provider's daily budget, calls, duplicates",
                      {"200": body(ref("Spend"))})},
        "/api/tasks/{task_id}": {
            "get": op("A task's timeline, calls and receipts", {"200": body(ref("TaskTimeline")), **errors(404)},
                      params=task, tag="tasks")},
        "/api/tasks/{task_id}/retry": {
            "post": op("Retry a failed task, or an unknown one accepting the duplicate-charge risk",
                       {"202": body(ref("RetryAccepted"), "Accepted", LOCATION), **errors(404, 409, 429)},
                       params=task, tag="tasks", request=ref("RetryInput"), body_required=False)},
        "/api/tasks/{task_id}/rerun": {
            "post": op("Rerun a dead-lettered task: a new run; the dead letter is kept and marked rerun",
                       {"202": body(ref("RerunAccepted"), "Accepted", LOCATION), **errors(404, 409, 429)},
                       params=task, tag="tasks", request=ref("RerunInput"))},
        "/api/tasks/{task_id}/replay": {
            "post": {**op("The rerun under its earlier name; its answer also has replay_id and replay_of",
                          {"202": body(ref("RerunAccepted"), "Accepted", LOCATION), **errors(404, 409, 429)},
                          params=task, tag="tasks", request=ref("RerunInput")), "deprecated": True}},
        "/api/tasks/{task_id}/resolve": {
            "post": op("Close an unknown task as failed", {"200": body(ref("Resolved")), **errors(400, 404, 409, 422)},
                       params=task, tag="tasks", request=ref("ResolveInput"))},
        "/api/jobs": {
            "post": {**op("Demo mode: a built-in lesson with an armed fault scenario (404 unless DEMO_MODE); a JSON "
                          "call straight from the server's own machine needs no key (docs/security.md, the demo door)",
                          {**accepted, **errors(404, 409, 429)}, request=ref("JobInput"), tag="demo"),
                     "security": [{"apiKey": []}, {}]}},
        "/api/openapi.json": {"get": op("This document", {"200": body(OBJECT)}, auth=False, tag="meta")},
        "/media/{sha256}": {"get": {**op(
            "A stored asset by its sha256: with an API key (or a signed-in session, Cache-Control: private), "
            "or with the signed, expiring link of a delivery manifest (no key; it serves while its version is the "
            "approved one)", {
                "200": {"description": "The asset bytes with their media type"},
                "401": body(ref("Error"), "Neither an API key, a signed-in session nor a signed link"),
                "403": body(ref("Error"), "The key may not read, or the signed link is invalid or expired"),
                "404": body(ref("Error"), "No such asset"),
                "410": body(ref("Error"), "The signed link's version is no longer the approved one"),
                **errors(422)},
            tag="media", params=[{"name": "sha256", "in": "path", "required": True,
                                  "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                                 query("c", ROW_ID, "the content a signed link was issued for"),
                                 query("v", VERSION_NUMBER, "the version a signed link was issued for"),
                                 {"name": "expires", "in": "query", "required": False,
                                  "schema": {"type": "string", "pattern": "^[0-9]{1,12}$"}},
                                 {"name": "signature", "in": "query", "required": False,
                                  "schema": {"type": "string", "pattern": "^[0-9a-f]{64}$"}},
                                 query("name", {"type": "string", "minLength": 1, "maxLength": 120},
                                       "the file name to save as: letters of any script, digits, '.', '-' and '_', "
                                       "not first a '.' (another is 404); its extension is always the asset's "
                                       "own"),
                                 query("captions", {"enum": ["vtt"]},
                                       "a lesson video's caption track, as a WebVTT file (text/vtt); 404 for any "
                                       "other asset")]),
            "security": [{"apiKey": []}, {}]}},
        "/metrics": {"get": {**op("Prometheus metrics read from PostgreSQL", {"200": {
            "description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}},
            "401": body(ref("Error"), "METRICS_TOKEN is set and the bearer token is missing or wrong"),
            "403": body(ref("Error"), "No METRICS_TOKEN and the call is not a direct one from this machine"),
            **errors(503)}, auth=False, tag="meta"), "security": [{"metricsToken": []}, {}]}},
        "/healthz": {"get": op("Liveness", {"200": body(OBJECT)}, auth=False, tag="meta")},
        "/readyz": {"get": op("Readiness of PostgreSQL, Redis and the schema",
                              {"200": body(OBJECT), "503": body(OBJECT, "Not ready")}, auth=False, tag="meta")},
    }


def content_schemas(speaks: tuple[str, ...]) -> dict:
    """A save's body; `speaks`: the languages the configured speech provider speaks (pipeline.versions.speakable),
    () for any."""
    fields = CONTENT_FIELDS
    if speaks:
        fields = {**fields, "locale": {**fields["locale"], "pattern": f"^({'|'.join(speaks)})(-[A-Za-z0-9]{{2,8}})*$",
                                       "description": f"a language tag the speech provider speaks: "
                                                      f"{', '.join(speaks)}, with subtags"}}
    return {"ContentInput": request_object(["title", "locale", "blocks"], fields),
            "ContentUpdate": request_object(["title", "locale", "blocks", "base_version"], {**fields, "base_version": {
                "type": "integer", "minimum": 1, "maximum": MAX_VERSION,
                "description": "the version the edit starts from; 409 unless it is the latest"}})}


def document(speaks: tuple[str, ...] = ()) -> dict:
    """The document of an app whose speech provider speaks `speaks` (() for any language)."""
    return {"openapi": "3.1.0",
            "info": {"title": "Media pipeline API", "version": "1.0.0",
                     "description": "Editors save content; images and narration are made by paid providers; "
                                    "reviewers approve; integrators fetch the delivery. Errors are "
                                    "{\"error\": {\"code\", \"message\"}}."},
            "paths": {**paths(), **review_paths()},
            "components": {"schemas": {**SCHEMAS, **content_schemas(speaks)},
                           "securitySchemes": {"apiKey": {"type": "apiKey", "in": "header", "name": "X-API-Key"},
                                               "metricsToken": {"type": "http", "scheme": "bearer"}}}}


@bp.get("/api/openapi.json")
def openapi_json():
    return jsonify(current_app.extensions["openapi"])
