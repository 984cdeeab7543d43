"""Presentation helpers for the templates: words for states and errors, times, money. Pure."""

from __future__ import annotations

from datetime import datetime, timezone

from flask import Flask

STATUS_WORDS = {
    "ready": "waiting", "running": "working", "retry": "will retry", "unknown": "outcome unknown",
    "failed": "failed", "succeeded": "done", "superseded": "superseded", "cancelled": "cancelled",
}
KIND_WORDS = {"image": "Image", "tts": "Narration", "bundle": "Bundle"}
# What the decision that recorded a task's last error means for the editor, by its code
# (pipeline/core/outcome.py `Reason`, stored as tasks.last_error_code).
ERROR_WORDS = {
    "unknown_outcome": "The provider may have done the work (and charged for it), but we could not confirm",
    "unclassified_error": "An unexpected error; treated as unknown so nothing is paid twice by accident",
    "busy": "The provider was busy or rate limited; trying again later without using up an attempt",
    "waiting_input": "Another task is making the same media; waiting for it without using up an attempt",
    "budget": "Paused by a spend budget; trying again later without using up an attempt",
    "transient": "The request never reached the provider",
    "permanent_error": "The provider refused the request",
    "attempts_exhausted": "Every attempt failed",
    "deadline_passed": "Ran out of time before it could finish",
    "lease_expired": "The worker stopped answering while it worked",
    "not_executed": "The provider says it never ran the request",
    "cancelled": "The version was cancelled",
    "resolved": "Closed as failed by an editor",
}


def status_words(status: str | None) -> str:
    return STATUS_WORDS.get(status or "", status or "")


def error_in_words(message: str | None, code: str | None = None) -> str:
    """A task's last error for the editor: what its decision's code means, then the details."""
    if not message:
        return ""
    words = ERROR_WORDS.get(code or "")
    return f"{words}. Details: {message}" if words else message


def paused_words(message: str | None) -> str:
    """A budget pause as the board says it: "paused: daily budget reached (... spent N of M today)"."""
    text = message or ""
    if text.startswith("busy (") and text.endswith(")"):   # the retry policy's wrapping of a wait
        text = text[len("busy ("):-1]
    start = text.find("paused:")
    return text[start:] if start >= 0 else "paused: a spend budget is reached"


def when(value: datetime | None) -> str:
    """Short absolute time in UTC, with the date only when it is not today."""
    if value is None:
        return ""
    value = value.astimezone(timezone.utc)
    today = datetime.now(timezone.utc).date()
    return value.strftime("%H:%M:%S UTC") if value.date() == today else value.strftime("%Y-%m-%d %H:%M UTC")


def seconds_until(value: datetime | None) -> str:
    if value is None:
        return ""
    delta = (value - datetime.now(timezone.utc)).total_seconds()
    return "now" if delta <= 0 else f"in {delta:.0f} s" if delta < 120 else f"in {delta / 60:.0f} min"


def money(value: float | int | None) -> str:
    return f"{float(value or 0):.4f}"


def init_app(app: Flask) -> None:
    app.jinja_env.filters.update(status_words=status_words, error_in_words=error_in_words, when=when,
                                 paused_words=paused_words,
                                 seconds_until=seconds_until, money=money,
                                 kind_words=lambda k: KIND_WORDS.get(k, k))
