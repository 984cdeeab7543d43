"""Contents and their versions: the JSON API to save, read, cancel and deliver them and to start demo jobs,
and the editors' pages for the same (contents list, editor, version board, delivery, demo lesson).

The delivery, in the API and on its page, carries the signed, expiring media links of web.media.
"""

from __future__ import annotations

import itertools
from flask import Blueprint, Response, flash, g, jsonify, redirect, render_template, request, url_for
from flask_babel import gettext, ngettext
from werkzeug.datastructures import MultiDict

from pipeline import demo, overview, review, versions
from pipeline.core import lanes
from pipeline.core.content import LIMITS, MAX_BLOCKS, download_name, parse_draft
from pipeline.core.errors import CapacityExceeded, Conflict, InvalidInput, KeyLimitReached, NotFound
from pipeline.core import kinds
from pipeline.log import log
from web import inputs
from web.auth import require
from web.db import get_conn, settings
from web.media import media_url, sign_delivery
from web.pages import back_to_board, need
from web.work import accepted, send_fast
from web.words import refusal

api = Blueprint("contents", __name__)   # under /api
ui = Blueprint("contents", __name__)
PAGE_SIZE = 50


# -- API --------------------------------------------------------------------------------------

def with_urls(doc: dict) -> dict:
    """Add asset URLs next to every sha256 of a version board."""
    for task in doc["tasks"]:
        task["asset_url"] = media_url(task["sha256"])
        task["url"] = url_for("api.tasks.get_task", task_id=task["id"])
    return doc


def _save(content_id: int | None) -> Response:
    body = inputs.json_object()
    key = inputs.idempotency_key()
    base = inputs.base_version(body) if content_id is not None else None
    draft = parse_draft(body)
    asked = lanes.parse_priority(body["priority"]) if "priority" in body else None   # "bulk": an import
    lane, why = lanes.save_lane(asked, len(draft.blocks), bulk_from=settings().bulk_save_blocks,
                                may_insist=g.principal.may("admin"))
    saved = versions.save(get_conn(), draft, settings(), by=g.principal, content_id=content_id, base_version=base,
                          save_key=key, lane=lane, send_at_once=True)
    log("saved", content_id=saved.content_id, version=saved.version, created=saved.created, lane=lane,
        outbox_ids=list(saved.outbox_ids))
    send_fast(saved.outbox_ids)
    return accepted(saved, priority=saved.lane, **({"priority_reason": why} if why else {}))


@api.get("/contents")
@require("read")
def list_contents():
    limit, offset = inputs.page_args()
    query = inputs.search_query()
    before = inputs.arg_int("before", None, low=1, what="a content id")
    return jsonify(overview.contents_list(get_conn(), team=g.principal.scope, limit=limit, offset=offset, query=query,
                                          before=before))


@api.post("/contents")
@require("edit")
def create_content():
    return _save(None)


@api.put("/contents/<id:content_id>")
@require("edit")
def update_content(content_id: int):
    return _save(content_id)


@api.get("/contents/<id:content_id>")
@require("read")
def get_content(content_id: int):
    doc = overview.content(get_conn(), content_id)
    doc["versions"] = [{**v, "url": url_for("api.contents.get_version", content_id=content_id,
                                            version=v["version"])}
                       for v in doc["versions"]]
    return jsonify(doc)


@api.get("/contents/<id:content_id>/versions/<ver:version>")
@require("read")
def get_version(content_id: int, version: int):
    doc = with_urls(overview.version(get_conn(), content_id, version))
    doc.pop("blocks")  # the tasks carry their block; the board's block rows are for the UI
    return jsonify(doc)


@api.post("/contents/<id:content_id>/versions/<ver:version>/cancel")
@require("edit")
def cancel_version(content_id: int, version: int):
    inputs.json_body(required=False)
    cancelled = versions.cancel(get_conn(), content_id, version, by=g.principal)
    location = url_for("api.contents.get_version", content_id=content_id, version=version)
    response = jsonify(content_id=content_id, version=version, cancelled_now=cancelled, status_url=location)
    response.status_code = 202
    response.headers["Location"] = location
    return response


def delivery_doc(content_id: int) -> dict:
    """The approved version's manifest; its media links are signed and expire (web.media)."""
    return sign_delivery(review.delivery(get_conn(), content_id))


@api.get("/contents/<id:content_id>/delivery")
@require("deliver")
def get_delivery(content_id: int):
    return jsonify(delivery_doc(content_id))


@api.post("/jobs")
@require("edit", demo_without_key=True)
def create_job():
    cfg = settings()
    if not cfg.demo_mode:
        raise NotFound("demo jobs exist only in demo mode (DEMO_MODE=true)")
    theme, scenario, locale = demo.parse_job(inputs.json_body())
    saved = demo.start_job(get_conn(), cfg, theme, scenario, locale=locale, by=g.principal)
    send_fast(saved.outbox_ids)
    return accepted(saved, theme=theme, scenario=scenario)


# -- pages ------------------------------------------------------------------------------------

@ui.get("/")
def index():
    offset = inputs.arg_int("offset", 0, low=0, high=inputs.MAX_OFFSET)
    page = overview.contents_list(get_conn(), team=g.user.scope, limit=PAGE_SIZE, offset=offset,
                                  query=inputs.search_query())
    return render_template("contents.html", page=page, themes=demo.themes(), scenarios=list(demo.SCENARIOS))


@ui.get("/contents/new")
def new_content():
    need("edit")
    blank = {"title": "", "locale": "zh-CN", "theme": "", "blocks": [{"key": "b1", "text": "", "image_prompt": ""}]}
    return render_template("editor.html", form=blank, content=None, limits=LIMITS)


@ui.get("/contents/<id:content_id>")
def content(content_id: int):
    doc = overview.content(get_conn(), content_id)
    return redirect(url_for("ui.contents.board", content_id=content_id, version=doc["current_version"]))


@ui.get("/contents/<id:content_id>/edit")
def edit_content(content_id: int):
    need("edit")
    doc = overview.content(get_conn(), content_id)
    form = {"title": doc["title"], "locale": doc["locale"], "theme": doc["theme"] or "",
            "blocks": doc["blocks"], "base_version": doc["current_version"]}
    return render_template("editor.html", form=form, content=doc, limits=LIMITS)


def _board(content_id: int, version: int) -> dict:
    doc = overview.version(get_conn(), content_id, version)
    doc["download_name"] = download_name(doc["title"], version)
    return doc


@ui.get("/contents/<id:content_id>/versions/<ver:version>")
def board(content_id: int, version: int):
    doc = _board(content_id, version)
    others = overview.content(get_conn(), content_id)["versions"]
    return render_template("board.html", v=doc, versions=others)


@ui.get("/contents/<id:content_id>/versions/<ver:version>/live")
def board_live(content_id: int, version: int):
    """The board's changing part, for the page's 2-second polling while work runs."""
    return render_template("_board.html", v=_board(content_id, version))


@ui.get("/contents/<id:content_id>/delivery")
def delivery(content_id: int):
    head = overview.content(get_conn(), content_id)
    try:
        manifest, blockers = sign_delivery(review.delivery(get_conn(), content_id)), None
    except Conflict as exc:
        if exc.code != "not_deliverable":
            raise
        manifest, blockers = None, exc.details
    return render_template("delivery.html", content=head, manifest=manifest, blockers=blockers)


def form_blocks(form: MultiDict) -> list[dict]:
    """Block rows from the editor's parallel lists; fully blank rows are dropped, missing keys filled from a counter.

    Rows over MAX_BLOCKS are counted, not filled: InvalidInput names how many came, before any work on them."""
    keys, texts, prompts = (form.getlist(name) for name in ("block_key", "block_text", "block_prompt"))

    def cell(values: list[str], i: int) -> str:
        return values[i].strip() if i < len(values) else ""

    filled = [i for i, text in enumerate(texts) if text.strip() or cell(keys, i) or cell(prompts, i)]
    if len(filled) > MAX_BLOCKS:
        raise InvalidInput(f"{len(filled)} blocks; the limit is {MAX_BLOCKS}", field="blocks")
    rows, used, numbers = [], {cell(keys, i) for i in filled} - {""}, itertools.count(1)
    for i in filled:
        key = cell(keys, i) or next(f"b{n}" for n in numbers if f"b{n}" not in used)
        used.add(key)
        rows.append({"key": key, "text": texts[i], "image_prompt": cell(prompts, i) or None})
    return rows


def form_draft(form: MultiDict) -> dict:
    return {"title": form.get("title", ""), "locale": form.get("locale", "").strip(),
            "theme": form.get("theme", "").strip() or None, "blocks": form_blocks(form)}


def reuse_summary(board: dict) -> str:
    """What a save will make anew and what it reuses, by block, in words."""
    media = [t for t in board["tasks"] if kinds.get(t["kind"]).per_block]
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


def _save_form(content_id: int | None):
    need("edit")
    raw_base = request.form.get("base_version")
    base = None if not raw_base else inputs.whole(raw_base, "base_version", low=1, high=inputs.MAX_VERSION,
                                                  what="a version number")
    content = overview.content(get_conn(), content_id) if content_id else None
    try:
        body = form_draft(request.form)
    except InvalidInput as exc:   # more rows than a version may have: nothing of them is worked on or shown again
        body = {**form_draft(MultiDict({k: request.form.get(k, "") for k in ("title", "locale", "theme")})),
                "blocks": [], "base_version": base}
        return render_template("editor.html", form=body, content=content, limits=LIMITS,
                               error=refusal(gettext("Not saved"), exc), field=exc.field), 422
    try:
        inputs.check_storable(body)
        draft = parse_draft(body)
        lane, _ = lanes.save_lane(None, len(draft.blocks), bulk_from=settings().bulk_save_blocks, may_insist=False)
        saved = versions.save(get_conn(), draft, settings(), by=g.user, content_id=content_id, base_version=base,
                              lane=lane, send_at_once=True)
    except (InvalidInput, Conflict, CapacityExceeded, KeyLimitReached) as exc:
        status = (422 if isinstance(exc, InvalidInput) else 409 if isinstance(exc, Conflict)
                  else 429 if isinstance(exc, KeyLimitReached) else 503)
        field = getattr(exc, "field", None)
        return render_template("editor.html", form={**body, "base_version": base}, content=content,
                               limits=LIMITS, error=refusal(gettext("Not saved"), exc), field=field), status
    send_fast(saved.outbox_ids)
    flash(reuse_summary(overview.version(get_conn(), saved.content_id, saved.version)), "ok")
    return back_to_board(saved.content_id, saved.version)


@ui.post("/contents/new")
def new_content_post():
    return _save_form(None)


@ui.post("/contents/<id:content_id>/edit")
def edit_content_post(content_id: int):
    return _save_form(content_id)


@ui.post("/contents/<id:content_id>/versions/<ver:version>/cancel")
def cancel(content_id: int, version: int):
    need("edit")
    try:
        count = versions.cancel(get_conn(), content_id, version, by=g.user)
    except Conflict as exc:
        flash(refusal(gettext("Not cancelled"), exc), "error")
        return back_to_board(content_id, version)
    flash(ngettext("Version %(version)s cancelled: %(count)s waiting task stopped now; a running one stops at its "
                   "next check.", "Version %(version)s cancelled: %(count)s waiting tasks stopped now; a running one "
                   "stops at its next check.", count, version=version, count=count), "ok")
    return back_to_board(content_id, version)


@ui.post("/demo")
def demo_job():
    need("edit")
    cfg = settings()
    if not cfg.demo_mode:
        raise NotFound("demo jobs exist only in demo mode (DEMO_MODE=true)")
    theme, scenario, _ = demo.parse_job({"theme": request.form.get("theme", ""),
                                         "scenario": request.form.get("scenario") or None})
    saved = demo.start_job(get_conn(), cfg, theme, scenario, by=g.user)
    send_fast(saved.outbox_ids)
    flash(gettext("Demo lesson %(theme)s created with the %(scenario)s scenario armed.", theme=theme,
                  scenario=scenario) if scenario else gettext("Demo lesson %(theme)s created.", theme=theme), "ok")
    return back_to_board(saved.content_id, saved.version)
