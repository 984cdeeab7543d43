"""The UI's own words for every error code it can meet, in the editor's language.

The JSON API keeps its English `message`s (its `code`s are the contract); pages and
flash messages say what a code means with these words instead, and add the English
detail only as a detail. No I/O.
"""

from __future__ import annotations

import re
from datetime import datetime

from flask_babel import format_time, gettext
from flask_babel import lazy_gettext as _l
from flask_babel import lazy_pgettext

from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound, StaleTransition

# Codes of pipeline.core.errors.Conflict, web.errors.Problem, the domain errors of web.errors,
# and the HTTP errors a page can answer with.
CODE_WORDS = {
    # refusals of a change
    "conflict": _l("The current state does not allow this"),
    "invalid_input": _l("Something in the form is not valid"),
    "stale_base_version": _l("Someone saved a newer version while you edited; open the latest version and "
                             "make your change there"),
    "idempotency_key_reused": _l("This request key was already used for a different request"),
    "older_than_approved": _l("A newer version is already approved; approve that one or a newer one"),
    "version_incomplete": _l("This version cannot be approved until every image and narration has succeeded"),
    "self_approval": _l("You saved this version; another person must approve it"),
    "already_paused": _l("The bulk lane is paused already"),
    "not_paused": _l("The bulk lane is not paused"),
    "link_withdrawn": _l("This link's version is no longer the approved one; fetch the delivery again"),
    "stale": _l("It changed while you were acting on it; reload the page and try again"),
    "stale_transition": _l("It changed while you were acting on it; reload the page and try again"),
    "invalid_transition": _l("Only failed or unknown tasks can be retried, and only unknown ones marked as failed"),
    "duplicate_risk": _l("The outcome is unknown: retrying may charge twice, so it needs your explicit consent"),
    "not_current": _l("This task belongs to an older version; retry its tasks on the current version"),
    "version_cancelled": _l("This version was cancelled; save a new version to run it again"),
    "nothing_to_cancel": _l("This version has nothing left to cancel; nothing was changed"),
    "not_deliverable": _l("Nothing can be delivered yet"),
    "version_approved": _l("This version is approved; withdraw its approval first"),
    "not_approved": _l("This version is not the approved one; there is no approval to withdraw"),
    "not_regenerable": _l("Only a succeeded image or narration can be regenerated"),
    "no_earlier_version": _l("This is the first version: there is no earlier one to compare it with"),
    "new_charge_unconfirmed": _l("A regeneration is a new paid call, so it needs your explicit consent"),
    "needs_consent": _l("An unknown outcome is retried only on its own page, with your consent"),
    "no_dead_letter": _l("This task has no dead letter to rerun"),
    "deadline_passed": _l("The task's deadline has passed; choose how much more time the rerun gets"),
    "scenario_unavailable": _l("This demo scenario needs the local image provider"),
    # capacity and limits
    "over_capacity": _l("The system is at capacity; nothing was saved, try again shortly"),
    "key_limit_reached": _l("Your key has reached its limit for now; nothing was saved, try again shortly"),
    "database_unavailable": _l("The database cannot be reached; try again shortly"),
    "database_busy": _l("The database is busy; nothing was changed, try again shortly"),
    # access and requests
    "unauthorized": _l("You need to sign in"),
    "forbidden": _l("Your role does not allow this"),
    "not_found": _l("There is no such page or item"),
    "bad_request": _l("The request could not be understood; reload the page and try again"),
    "method_not_allowed": _l("This address does not accept that kind of request"),
    "request_entity_too_large": _l("What you sent is too large"),
    "content_too_large": _l("What you sent is too large"),
    "invalid_json": _l("The request body is not valid JSON"),
    "json_too_deep": _l("The request body is nested too deeply"),
    "invalid_header": _l("A request header is not valid"),
    "invalid_link": _l("This media link is not valid"),
    "link_expired": _l("This media link has expired"),
    "internal_error": _l("Something went wrong on our side; it was logged"),
    "internal_server_error": _l("Something went wrong on our side; it was logged"),
}

ROLE_WORDS = {"editor": _l("editor"), "reviewer": _l("reviewer"), "admin": _l("admin")}

OUTCOME_WORDS = {
    "succeeded": _l("succeeded"), "reused": _l("reused"), "permanent": _l("refused"), "transient": _l("not sent"),
    "ambiguous": _l("outcome unknown"), "busy": _l("busy"), "recovered": _l("recovered"), "replayed": _l("replayed"),
    "refused": _l("refused by the safety system"),
}
ACTION_WORDS = {   # the English words are the action's own name (but the rerun's, stored under its earlier one)
    "transition": _l("transition"), "reused": _l("reused"), "replayed": _l("replayed"),
    "recovered_from_receipt": _l("recovered from receipt"),
    "duplicate_risk_accepted": _l("duplicate risk accepted"), "manual_retry": _l("manual retry"),
    "dead_letter_replayed": _l("dead letter rerun"),
    "resolved_failed": _l("resolved failed"), "approve": _l("approve"), "approved": _l("approved"),
    "cancel": _l("cancel"), "cancelled": _l("cancelled"), "superseded": _l("superseded"),
    "rejected": _l("rejected"), "changes_requested": _l("changes requested"),
    "approval_withdrawn": _l("approval withdrawn"), "regenerated": _l("regenerated"),
    "batched": _l("sent in a batch"), "storage_wait": _l("waiting for storage"),
}
# Actions whose event reason is a person's own note, shown as it was written.
NOTE_ACTIONS = frozenset({"rejected", "changes_requested", "approval_withdrawn", "regenerated", "resolved_failed",
                          "dead_letter_replayed", "cancel"})
# The system's fixed reasons (events.reason as the engine, the reconciler and review.py write them), in words.
REASON_TEXT_WORDS = {
    "claimed": _l("a worker took it"),
    "succeeded": _l("the result is stored"),
    "reused": _l("an identical input already produced this asset"),
    "an identical input already produced this asset": _l("an identical input already produced this asset"),
    "result found after the lease expired": _l("its result was found after its worker stopped answering"),
    "the provider's lookup returned the result": _l("the provider's lookup returned the result"),
    "deadline passed": _l("its deadline passed"),
    "deadline passed before the task could run": _l("its deadline passed before it could run"),
    "version cancelled": _l("its version was cancelled"),
    "version cancelled; lease expired": _l("its version was cancelled"),
    "a newer version exists": _l("a newer version exists"),
    "retried by an editor": _l("retried by an editor"),
    "retry accepted with the risk of a duplicate charge": _l("retried, accepting the risk of a second charge"),
    "its call waits for a Batch API job": _l("its call waits for a batch job"),
}
REASON_PATTERNS = ((re.compile(r"^version (\d+) approved for delivery$"), _l("version %(n)s approved for delivery")),
                   (re.compile(r"^superseded by version (\d+)$"), _l("superseded by version %(n)s")))
# A decision's code (pipeline/core/outcome.py `Reason`, kept in a transition event's details), in a timeline's short
# words where they differ from what the task's error says (web.present ERROR_WORDS, used for the others).
SETTLED_WORDS = {"unknown_outcome": _l("no answer we can trust: its outcome is unknown"),   # its page explains
                 "unclassified_error": _l("an unexpected error: its outcome is unknown"),
                 "succeeded": _l("the result is stored"),
                 "reused": _l("an identical input already produced this asset"),
                 "recovered": _l("its result was found after its worker stopped answering")}


# Why a task went to the dead letters (dead_letters.reason, as pipeline/core/policy.py and recovery.py write it).
DEAD_LETTER_WORDS = {"deadline passed": _l("its deadline passed"),
                     "deadline passed while busy": _l("its deadline passed while the provider was busy"),
                     "attempts exhausted": _l("every attempt failed"),
                     "permanent error": _l("the provider refused the request"),
                     "refused by the provider": _l("the provider refused this prompt"),
                     "model no longer served": _l("the provider no longer serves its model")}


def dead_letter_words(reason: str | None) -> str:
    return str(DEAD_LETTER_WORDS.get(reason or "", reason or ""))


def reason_words(reason: str) -> str | None:
    """One of the system's fixed reasons in the editor's language, or None for a text we do not know (an error's
    details, a reason written before this list)."""
    words = REASON_TEXT_WORDS.get(reason)
    if words is not None:
        return str(words)
    for pattern, template in REASON_PATTERNS:
        found = pattern.match(reason)
        if found:
            return str(template) % {"n": found.group(1)}
    return None


# How a block or a media changed between two versions (pipeline.core.compare).
CHANGE_WORDS = {"added": _l("added"), "removed": _l("removed"), "changed": _l("changed"),
                "unchanged": _l("unchanged"), "reused": _l("reused"), "new": _l("new"),
                "superseded": _l("superseded")}
# What needs a person (pipeline.attention), and what they may do about it.
PROBLEM_WORDS = {"unknown": _l("outcome unknown"), "refused": _l("the provider refused this prompt"),
                 "model_gone": _l("the provider no longer serves its model"),
                 "failed": _l("failed"), "budget": _l("paused by a budget"),
                 "storage": _l("local storage failing: media and receipts cannot be written"),
                 "stuck": _l("past its deadline"), "revoked": _l("cancelled: its key was revoked")}
ATTENTION_ACTION_WORDS = {"retry_with_consent": _l("retry, accepting a possible second charge"),
                          "resolve_failed": _l("mark as failed"), "retry": _l("retry"),
                          "edit_block": _l("edit the block's prompt"),
                          "set_live_model": _l("set a live model (IMAGE_MODEL or TTS_MODEL), then retry"),
                          "cancel_version": _l("cancel the version, or raise the budget"),
                          "save_again": _l("save it again, if it is still wanted")}
# Why a task needs a person when it recorded no error of its own, by its problem.
PROBLEM_WHY_WORDS = {"revoked": _l("the key that saved it was revoked, and its unstarted work cancelled"),
                     "unknown": _l("its outcome is unknown"), "failed": _l("it failed"),
                     "refused": _l("the provider refused this prompt"),
                     "model_gone": _l("the provider no longer serves its model"),
                     "budget": _l("paused: a spend budget is reached"), "stuck": _l("it waits past its deadline"),
                     "storage": _l("local storage failing: media and receipts cannot be written")}
SCENARIO_WORDS = {
    "media_timeout": _l("an image call fails before it reaches the provider"),
    "provider_unknown": _l("the provider does the work, the answer is lost and cannot be looked up: you decide"),
    "worker_crash": _l("the worker dies in the middle of a call"),
    "permanent_error": _l("the provider refuses the request for good"),
    "rate_limited": _l("the provider is busy (rate limited)"),
}
# A task state as the engine names it, for sentences that count tasks by state.
STATE_NAMES = {
    "ready": lazy_pgettext("task state", "ready"), "running": lazy_pgettext("task state", "running"),
    "retry": lazy_pgettext("task state", "retry"), "unknown": lazy_pgettext("task state", "unknown"),
    "failed": lazy_pgettext("task state", "failed"), "succeeded": lazy_pgettext("task state", "succeeded"),
    "superseded": lazy_pgettext("task state", "superseded"), "cancelled": lazy_pgettext("task state", "cancelled"),
}
# pipeline.core.delivery.ApprovalBlocker.summary says why a version cannot be approved, in English; these say it again.
_OLDER = re.compile(r"^version (\d+) is already approved")
_WAITING = re.compile(r"^not every image and narration has succeeded: (.*)$")
_COUNT = re.compile(r"^(\d+) ([a-z_]+)$")


def state_name(state: str | None) -> str:
    """A task state by its name (English: the engine's own word), for timelines and counts."""
    return str(STATE_NAMES.get(state or "", state or ""))


def outcome_words(outcome: str | None) -> str:
    return str(OUTCOME_WORDS.get(outcome or "", outcome or ""))


def scenario_words(scenario: str | None) -> str:
    words = SCENARIO_WORDS.get(scenario or "")
    return f"{scenario}: {words}" if words is not None else (scenario or "")


def action_words(action: str | None) -> str:
    return str(ACTION_WORDS.get(action or "", (action or "").replace("_", " ")))


def blocker_words(reason: str) -> str:
    """One approval blocker in the editor's language (the English reason if its shape is new to us)."""
    older = _OLDER.match(reason)
    if older:
        return gettext("version %(version)s is already approved; an older version cannot be approved",
                       version=older.group(1))
    waiting = _WAITING.match(reason)
    if waiting:
        counts = [_COUNT.match(part.strip()) for part in waiting.group(1).split(",")]
        if all(counts):
            listed = gettext(", ").join(f"{m.group(1)} {state_name(m.group(2))}" for m in counts if m)
            return gettext("not every image and narration has succeeded: %(states)s", states=listed)
    return reason


def role_words(role: str | None) -> str:
    return str(ROLE_WORDS.get(role or "", role or ""))


def code_words(code: str | None) -> str:
    """What an error code means, in the editor's language (the code itself if it is new to us)."""
    words = CODE_WORDS.get(code or "")
    return str(words) if words is not None else gettext("Error: %(code)s", code=code or "")


def code_of(exc: Exception) -> str:
    """The code the API answers for this error (web.errors maps the same classes)."""
    if isinstance(exc, Conflict):
        return exc.code
    return {InvalidInput: "invalid_input", NotFound: "not_found", StaleTransition: "stale_transition",
            CapacityExceeded: "over_capacity", KeyLimitReached: "key_limit_reached"}.get(type(exc), "internal_error")


def refusal(prefix: str, exc: Exception) -> dict:
    """A message for a refused action (a flash, or a form's error): our words for its code, and the English detail
    that pages fold away under them (web.present `message_html`). A mapping, so a flash keeps both parts in the
    session."""
    return {"text": gettext("%(prefix)s: %(words)s.", prefix=prefix, words=code_words(code_of(exc))),
            "detail": str(exc)}


def change_words(change: str | None) -> str:
    return str(CHANGE_WORDS.get(change or "", change or ""))


def problem_words(problem: str | None) -> str:
    return str(PROBLEM_WORDS.get(problem or "", problem or ""))


def attention_action_words(action: str | None) -> str:
    return str(ATTENTION_ACTION_WORDS.get(action or "", action or ""))


# pipeline.core.diagnosis: why a task is where it is, one line per code
DIAGNOSIS_WORDS = {
    "finished": _l("finished: %(status)s"),
    "needs_decision": _l("the outcome of its call is unknown: a person decides (retry, accepting a possible second "
                         "charge, or resolve it)"),
    "lease_expired": _l("running, last heartbeat %(heartbeat_age)s s ago: its lease ran out at %(lease_until)s, "
                        "recovery takes it by %(recovered_by)s"),
    "running": _l("running on %(worker)s, last heartbeat %(heartbeat_age)s s ago"),
    "starting": _l("claimed by %(worker)s, no heartbeat yet"),
    "waiting_for_dependency": _l("waiting for %(kind)s task %(task_id)s (%(status)s)"),
    "waiting_for_input": _l("waiting for another task that makes the same input: its end wakes it (at the latest %(until)s)"),
    "waiting_for_budget": _l("waiting for the provider's budget, until %(until)s"),
    "waiting_for_slot": _l("waiting for a free call slot: the next one to free wakes it (at the latest %(until)s)"),
    "waiting_for_storage": _l("waiting for the store of media and receipts to take writes again: it tries again at "
                              "%(until)s, without using up an attempt"),
    "backing_off": _l("backing off until %(until)s (attempt %(attempt)s of %(max_attempts)s)"),
    "lane_paused": _l("the bulk lane is paused since %(since)s by %(by)s: it starts when the lane resumes, and its "
                      "deadline moves on by the pause"),
    "not_sent": _l("due, not yet sent to a worker: is the dispatcher running?"),
    "queued": _l("sent to its queue %(dispatches)s times, not yet claimed: are workers running for it? A lost "
                 "message is sent again %(resend_after)s s after it went out"),
}


def diagnosis_words(diagnosis: dict, kind_words) -> str:
    """A task's diagnosis in the editor's language (its English text if the code is new to us)."""
    words = DIAGNOSIS_WORDS.get(diagnosis["code"])
    if words is None:
        return diagnosis["text"]
    params = {k: format_time(v, "medium") if isinstance(v, datetime) else v for k, v in diagnosis["params"].items()}
    if "kind" in params:
        params["kind"] = kind_words(params["kind"])
    if "status" in params:
        params["status"] = state_name(params["status"])
    return str(words) % params
