"""The editors' form posts: save, approve, cancel, retry, replay, resolve, demo job, language and time zone.

Each parses the form, calls `pipeline`, and redirects (303) to the page that shows the
result, with a flash message in words. Refusals the editor can act on (a stale base
version, an incomplete version, a missing confirmation) come back as messages, not errors.
"""

from __future__ import annotations

from flask import flash, g, redirect, render_template, request, url_for
from flask_babel import gettext
from werkzeug.datastructures import MultiDict

from pipeline import demo, overview, replay, review, versions
from pipeline.core.content import LIMITS, parse_draft
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound
from pipeline.core.records import MAX_NOTE
from web import i18n
from web.api import send_fast
from web.db import get_conn, settings
from web.inputs import MAX_VERSION, check_storable, whole
from web.ui import _safe_next, bp, need
from web.words import refusal


def form_blocks(form: MultiDict) -> list[dict]:
    """Block rows from the editor's parallel lists; fully blank rows are dropped, missing keys filled."""
    keys, texts, prompts = (form.getlist(name) for name in ("block_key", "block_text", "block_prompt"))
    rows, used = [], {k.strip() for k in keys if k.strip()}
    for i, text in enumerate(texts):
        key = keys[i].strip() if i < len(keys) else ""
        prompt = prompts[i].strip() if i < len(prompts) else ""
        if not key and not text.strip() and not prompt:
            continue
        if not key:
            key = next(f"b{n}" for n in range(1, 10_000) if f"b{n}" not in used)
            used.add(key)
        rows.append({"key": key, "text": text, "image_prompt": prompt or None})
    return rows


def form_draft(form: MultiDict) -> dict:
    return {"title": form.get("title", ""), "locale": form.get("locale", "").strip(),
            "theme": form.get("theme", "").strip() or None, "blocks": form_blocks(form)}


def reuse_summary(board: dict) -> str:
    """What a save will make anew and what it reuses, by block, in words."""
    media = [t for t in board["tasks"] if t["kind"] != "bundle"]
    reused = [t for t in media if t["reusable"]]
    fresh_blocks = sorted({t["block"] for t in media if not t["reusable"]})
    reused_blocks = sorted({t["block"] for t in reused} - set(fresh_blocks))
    words = gettext("Saved version %(version)s. %(reused)s of %(total)s media will be reused from earlier work",
                    version=board["version"], reused=len(reused), total=len(media))
    if reused_blocks:
        words += gettext(" (blocks %(blocks)s unchanged)", blocks=", ".join(reused_blocks))
    if fresh_blocks:
        words += gettext("; new media for %(blocks)s", blocks=", ".join(fresh_blocks))
    return words + gettext(".")


def _save(content_id: int | None):
    need("edit")
    body = form_draft(request.form)
    raw_base = request.form.get("base_version")
    base = None if not raw_base else whole(raw_base, "base_version", low=1, high=MAX_VERSION, what="a version number")
    content = overview.content(get_conn(), content_id) if content_id else None
    try:
        check_storable(body)
        saved = versions.save(get_conn(), parse_draft(body), settings(), actor=g.user.owner,
                              content_id=content_id, base_version=base, key_id=g.user.key_id, send_at_once=True)
    except (InvalidInput, Conflict, CapacityExceeded, KeyLimitReached) as exc:
        status = (422 if isinstance(exc, InvalidInput) else 409 if isinstance(exc, Conflict)
                  else 429 if isinstance(exc, KeyLimitReached) else 503)
        field = getattr(exc, "field", None)
        return render_template("editor.html", form={**body, "base_version": base}, content=content,
                               limits=LIMITS, error=refusal(gettext("Not saved"), exc), field=field), status
    send_fast(saved.outbox_ids)
    flash(reuse_summary(overview.version(get_conn(), saved.content_id, saved.version)), "ok")
    return redirect(url_for("ui.board", content_id=saved.content_id, version=saved.version), code=303)


@bp.post("/contents/new")
def create_content():
    return _save(None)


@bp.post("/contents/<id:content_id>/edit")
def update_content(content_id: int):
    return _save(content_id)


def _back_to_board(content_id: int, version: int):
    return redirect(url_for("ui.board", content_id=content_id, version=version), code=303)


@bp.post("/contents/<id:content_id>/versions/<ver:version>/approve")
def approve(content_id: int, version: int):
    need("review")
    try:
        review.approve(get_conn(), content_id, version, actor=g.user.owner, key_id=g.user.key_id,
                       allow_self=settings().allow_self_approval)
        flash(gettext("Version %(version)s is approved; it is what the delivery serves now.", version=version), "ok")
    except Conflict as exc:
        flash(refusal(gettext("Not approved"), exc), "error")
    return _back_to_board(content_id, version)


@bp.post("/contents/<id:content_id>/versions/<ver:version>/cancel")
def cancel(content_id: int, version: int):
    need("edit")
    try:
        count = versions.cancel(get_conn(), content_id, version, actor=g.user.owner)
    except Conflict as exc:
        flash(refusal(gettext("Not cancelled"), exc), "error")
        return _back_to_board(content_id, version)
    flash(gettext("Version %(version)s cancelled: %(count)s waiting tasks stopped now; a running one stops at its "
                  "next check.", version=version, count=count), "ok")
    return _back_to_board(content_id, version)


def _task_redirect(task_id: int):
    if request.form.get("back") == "task":
        return redirect(url_for("ui.task", task_id=task_id), code=303)
    return _back_to_board(*overview.task_place(get_conn(), task_id))


@bp.post("/tasks/<id:task_id>/retry")
def retry(task_id: int):
    need("edit")
    accept = request.form.get("accept_duplicate_risk") == "yes"
    try:
        reopened = review.retry(get_conn(), task_id, settings(), actor=g.user.owner, accept_duplicate_risk=accept,
                                key_id=g.user.key_id)
        send_fast(reopened.outbox_ids)
        flash(gettext("Task %(task)s will run again (attempt budget now %(attempts)s), with the duplicate-charge "
                      "risk accepted by you.", task=task_id, attempts=reopened.max_attempts) if accept else
              gettext("Task %(task)s will run again (attempt budget now %(attempts)s).", task=task_id,
                      attempts=reopened.max_attempts), "ok")
    except (Conflict, CapacityExceeded) as exc:
        flash(refusal(gettext("Not retried"), exc), "error")
    return _task_redirect(task_id)


EXTENSIONS = {"": None, "1h": 3600, "1d": 86_400}   # the replay form's deadline choices


@bp.post("/tasks/<id:task_id>/replay")
def replay_task(task_id: int):
    need("edit")
    why = request.form.get("why", "").strip()
    extension = request.form.get("extend", "")
    if not why or extension not in EXTENSIONS:
        flash(gettext("Say why you replay it; the reason is kept with its dead letter."), "error")
        return _task_redirect(task_id)
    try:
        check_storable(why, "why")
        done = replay.replay(get_conn(), task_id, settings(), actor=g.user.owner, why=why[:MAX_NOTE],
                             key_id=g.user.key_id,
                             extend_deadline_seconds=EXTENSIONS[extension])
        send_fast(done.outbox_ids)
        flash(gettext("Task %(task)s is replayed from attempt %(attempt)s; its dead letter is kept.",
                      task=task_id, attempt=done.first_attempt), "ok")
    except (Conflict, CapacityExceeded, InvalidInput) as exc:
        flash(refusal(gettext("Not replayed"), exc), "error")
    return _task_redirect(task_id)


@bp.post("/tasks/<id:task_id>/resolve")
def resolve(task_id: int):
    need("edit")
    note = request.form.get("note", "").strip()
    if not note:
        flash(gettext("Say why you mark it as failed (for example what the provider's dashboard shows)."), "error")
        return _task_redirect(task_id)
    try:
        check_storable(note, "note")
        review.resolve_failed(get_conn(), task_id, note[:MAX_NOTE], actor=g.user.owner)
        flash(gettext("Task %(task)s is marked as failed.", task=task_id), "ok")
    except (Conflict, InvalidInput) as exc:
        flash(refusal(gettext("Not changed"), exc), "error")
    return _task_redirect(task_id)


@bp.post("/demo")
def demo_job():
    need("edit")
    cfg = settings()
    if not cfg.demo_mode:
        raise NotFound("demo jobs exist only in demo mode (DEMO_MODE=true)")
    theme, scenario, _ = demo.parse_job({"theme": request.form.get("theme", ""),
                                         "scenario": request.form.get("scenario") or None})
    saved = demo.start_job(get_conn(), cfg, theme, scenario, actor=g.user.owner, key_id=g.user.key_id)
    send_fast(saved.outbox_ids)
    flash(gettext("Demo lesson %(theme)s created with the %(scenario)s scenario armed.", theme=theme,
                  scenario=scenario) if scenario else gettext("Demo lesson %(theme)s created.", theme=theme), "ok")
    return redirect(url_for("ui.board", content_id=saved.content_id, version=saved.version), code=303)


@bp.post("/preferences")
def preferences():
    """The header switch: language and time zone, kept in the session (web.i18n)."""
    i18n.change(request.form)
    return redirect(_safe_next(request.form.get("next")), code=303)
