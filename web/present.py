"""Presentation helpers for the templates: words for states and errors, times, numbers, money.

Every word is translatable (Flask-Babel, see web.i18n); times are shown in the editor's
time zone with the UTC time on hover; numbers and costs in the locale's format.
No I/O.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from flask import Flask
from flask_babel import format_datetime, format_decimal, format_time, format_timedelta, gettext, to_user_timezone
from flask_babel import lazy_gettext as _l
from markupsafe import Markup

from web.words import (NOTE_ACTIONS, PROBLEM_WHY_WORDS, SETTLED_WORDS, action_words, attention_action_words, blocker_words, change_words,
                       code_words, dead_letter_words, diagnosis_words, outcome_words, problem_words, reason_words, role_words,
                       scenario_words, state_name)

STATUS_WORDS = {
    "ready": _l("waiting"), "running": _l("working"), "retry": _l("will retry"), "unknown": _l("outcome unknown"),
    "failed": _l("failed"), "succeeded": _l("done"), "superseded": _l("superseded"), "cancelled": _l("cancelled"),
}
KIND_WORDS = {"image": _l("Image"), "tts": _l("Narration"), "bundle": _l("Bundle")}
# What the decision that recorded a task's last error means for the editor, by its code
# (pipeline/core/outcome.py `Reason`, stored as tasks.last_error_code).
ERROR_WORDS = {
    "unknown_outcome": _l("The provider may have done the work (and charged for it), but we could not confirm"),
    "unclassified_error": _l("An unexpected error; treated as unknown so nothing is paid twice by accident"),
    "busy": _l("The provider was busy or rate limited; trying again later without using up an attempt"),
    "waiting_input": _l("Another task is making the same media; waiting for it without using up an attempt"),
    "budget": _l("Paused by a spend budget; trying again later without using up an attempt"),
    "storage": _l("Media and receipts could not be written (a full disk, a read-only directory?); trying again "
                  "later without using up an attempt"),
    "transient": _l("The request never reached the provider"),
    "permanent_error": _l("The provider refused the request"),
    "refused": _l("The provider refused this prompt; edit the block to rewrite it"),
    "model_gone": _l("The provider no longer serves this model: an operator sets a live one (IMAGE_MODEL or "
                     "TTS_MODEL) and restarts the workers, then retry"),
    "attempts_exhausted": _l("Every attempt failed"),
    "deadline_passed": _l("Ran out of time before it could finish"),
    "lease_expired": _l("The worker stopped answering while it worked"),
    "not_executed": _l("The provider says it never ran the request"),
    "cancelled": _l("The version was cancelled"),
    "resolved": _l("Closed as failed by an editor"),
}


def status_words(status: str | None) -> str:
    return STATUS_WORDS.get(status or "", status or "")


def folded(words: str, raw: str) -> Markup:
    """Our words, with the raw text they stand for (a provider's error, the system's own detail) folded under
    "Details": the editor reads their language, and the details are one click away, as they were written."""
    return Markup('{} <details class="raw"><summary>{}</summary><code>{}</code></details>').format(
        words, gettext("Details"), raw)


def error_in_words(message: str | None, code: str | None = None) -> Markup | str:
    """A task's last error for the editor: what its decision's code means, the error itself folded away."""
    if not message:
        return ""
    words = ERROR_WORDS.get(code or "") or gettext("The last attempt ended with an error")
    return folded(words, message)


def message_html(message: dict | str) -> Markup | str:
    """A flash or a form's message: a refusal (web.words.refusal) as our words with its detail folded away."""
    if isinstance(message, dict):
        return folded(message.get("text", ""), message.get("detail", ""))
    return message


def reason_in_words(event: dict) -> Markup | str:
    """An event's reason for the editor: a person's note as written; the system's reasons in the editor's words (by
    the decision's code where the event keeps it), with the raw text folded away when there is more to it."""
    reason = event.get("reason") or ""
    if not reason or event.get("action") in NOTE_ACTIONS:
        return reason
    fixed = reason_words(reason)
    if fixed is not None:
        return fixed
    code = (event.get("details") or {}).get("code") or ""
    words = SETTLED_WORDS.get(code) or ERROR_WORDS.get(code) or gettext("as the system recorded it")
    return folded(str(words), reason)


def paused_words(message: str | None) -> str:
    """A budget pause as the board says it: "paused: daily budget reached (... spent N of M today)"."""
    text = message or ""
    if text.startswith("busy (") and text.endswith(")"):   # the retry policy's wrapping of a wait
        text = text[len("busy ("):-1]
    start = text.find("paused:")
    if start < 0:
        return gettext("paused: a spend budget is reached")
    return gettext("paused: %(details)s", details=text[start + len("paused:"):].strip())


def when(value: datetime | None) -> Markup | str:
    """Short time in the editor's time zone, with the date only when it is not today; UTC on hover."""
    if value is None:
        return ""
    if value.tzinfo is None:
        value = value.replace(tzinfo=timezone.utc)
    utc = value.astimezone(timezone.utc)
    today = to_user_timezone(datetime.now(timezone.utc)).date()
    same_day = to_user_timezone(value).date() == today
    shown = format_time(value, "medium") if same_day else format_datetime(value, "medium")
    return Markup('<time datetime="{}" title="{}">{}</time>').format(
        utc.isoformat(), utc.strftime("%Y-%m-%d %H:%M:%S UTC"), shown)


def seconds_until(value: datetime | None) -> str:
    if value is None:
        return ""
    delta = (value - datetime.now(timezone.utc)).total_seconds()
    if delta <= 0:
        return gettext("now")
    return format_timedelta(timedelta(seconds=round(delta)), threshold=2, add_direction=True)


def money(value: float | int | None) -> str:
    """An estimated cost with four decimals, in the locale's digits and separators."""
    return format_decimal(float(value or 0), format="#,##0.0000")


def number(value: float | int | None) -> str:
    return format_decimal(value or 0)


def seconds(value: float | int | None) -> str:
    return gettext("%(seconds)s s", seconds=format_decimal(float(value or 0), format="0.0"))


def milliseconds(value: float | int | None) -> str:
    return gettext("%(ms)s ms", ms=format_decimal(value or 0))


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(status_words=status_words, error_in_words=error_in_words, when=when,
                                 reason_in_words=reason_in_words, dead_letter_words=dead_letter_words,
                                 message_html=message_html,
                                 problem_why_words=lambda p: str(PROBLEM_WHY_WORDS.get(p or "", p or "")),
                                 paused_words=paused_words,
                                 seconds_until=seconds_until, money=money, number=number, seconds=seconds,
                                 milliseconds=milliseconds, code_words=code_words, role_words=role_words,
                                 outcome_words=outcome_words, action_words=action_words, blocker_words=blocker_words,
                                 scenario_words=scenario_words, state_name=state_name, change_words=change_words,
                                 problem_words=problem_words, attention_action_words=attention_action_words,
                                 kind_words=lambda k: KIND_WORDS.get(k, k),
                                 diagnosis_words=lambda d: diagnosis_words(d, lambda k: str(KIND_WORDS.get(k, k))))
