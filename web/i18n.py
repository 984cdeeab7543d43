"""The UI's language and time zone: Flask-Babel set-up, catalogs compiled at start, the header switch.

The language of a page is, in order: the one chosen in the header switch (kept in the
server-side session, web.sessions), a `lang` the sign-in page was opened with, then the
browser's `Accept-Language`; English where nothing matches. The time zone is the one
kept in the session: the sign-in form sends the browser's own (static/app.js fills it in)
and the header switch changes it; UTC before that.

The JSON API, media and metrics answer in English and UTC whatever the request says:
their error `code`s are the contract and their `message`s stay English. Nothing here
touches the session table for them.

Catalogs (`web/translations/<locale>/LC_MESSAGES/messages.po`) are compiled to `.mo`
when the app starts (bin/dev, bin/test, gunicorn alike); a `.mo` is rewritten only when
it differs. The compiled files are not kept in the repository.
"""

from __future__ import annotations

import io
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
from babel.messages.mofile import write_mo
from babel.messages.pofile import read_po
from flask import Blueprint, Flask, redirect, request
from flask_babel import Babel, get_locale
from werkzeug.exceptions import RequestEntityTooLarge

from pipeline.core.errors import ConfigError, InvalidInput
from web import sessions
from web.errors import is_api
from web.inputs import safe_next

TRANSLATIONS = Path(__file__).resolve().parent / "translations"
# Locale ids as Babel spells them, with the name each language has in itself.
LANGUAGES = {"zh_Hans": "中文", "en": "English"}
DEFAULT_LANGUAGE = "en"
# Offered in the header's time-zone field; any IANA name is accepted.
COMMON_ZONES = ("Asia/Shanghai", "Asia/Hong_Kong", "Asia/Taipei", "Asia/Singapore", "Asia/Tokyo",
                "Europe/London", "Europe/Berlin", "America/New_York", "America/Los_Angeles", "UTC")
MAX_ZONE = 64
ui = Blueprint("i18n", __name__)   # the header switch


def language_of(tag: str | None) -> str | None:
    """Our locale id for a language tag (`zh-CN`, `zh_Hans`, `en-GB`, ...), or None."""
    tag = (tag or "").strip().replace("-", "_").lower()
    if tag.startswith("zh"):
        return "zh_Hans"
    if tag == "en" or tag.startswith("en_"):
        return "en"
    return None


def zone_of(name: str | None) -> str | None:
    """A valid IANA time-zone name, or None."""
    name = (name or "").strip()
    if not name or len(name) > MAX_ZONE or name.startswith(("/", ".")) or ".." in name:
        return None
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None
    return name


def _chosen(key: str) -> str | None:
    try:
        sess = sessions.current()
    except psycopg.Error:   # the page saying the database is away still renders, in the browser's language
        return None
    return sess.get(key) if sess.principal is not None else None


def _asked() -> str | None:
    """The language a link (?lang=) or the sign-in form asks for; a body too large to read asks nothing, so its 413
    page still renders."""
    try:
        return request.values.get("lang")
    except RequestEntityTooLarge:
        return request.args.get("lang")


def select_locale() -> str:
    if is_api():
        return DEFAULT_LANGUAGE
    chosen = language_of(_chosen("lang")) or language_of(_asked())
    if chosen:
        return chosen
    for tag, _quality in request.accept_languages:
        found = language_of(tag)
        if found:
            return found
    return DEFAULT_LANGUAGE


def select_timezone() -> str:
    if is_api():
        return "UTC"
    return zone_of(_chosen("tz")) or "UTC"


def remember(form) -> None:
    """At sign-in: keep a language chosen on the sign-in page and the browser's time zone in the new session."""
    sess = sessions.current()
    lang = language_of(form.get("lang"))
    if lang:
        sess["lang"] = lang
    zone = zone_of(form.get("tz"))
    if zone:
        sess["tz"] = zone


def change(form) -> None:
    """The header switch: a new language and/or time zone for this session; bad values change nothing."""
    lang, zone = form.get("lang", "").strip(), form.get("tz", "").strip()
    if lang and not language_of(lang):
        raise InvalidInput(f"lang must be one of {', '.join(LANGUAGES)}", field="lang")
    if zone and not zone_of(zone):
        raise InvalidInput("tz must be an IANA time-zone name such as Asia/Shanghai or UTC", field="tz")
    sess = sessions.current()
    if lang:
        sess["lang"] = language_of(lang)
    if zone:
        sess["tz"] = zone_of(zone)


@ui.post("/preferences")
def preferences():
    """The header switch: a new language and/or time zone (`change`), then back to the page it was on."""
    change(request.form)
    return redirect(safe_next(request.form.get("next")), code=303)


def _write_atomically(path: Path, write) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


UNDATED = datetime(1970, 1, 1, tzinfo=timezone.utc)   # the creation date of a catalog whose file names none


# The catalogs this process has compiled or found compiled: .po -> (its stat, the .mo's stat) at that moment. Each
# app compiles on creation, and compiling both catalogs cost 0.17 s of CPU: a process making apps again (gunicorn's
# workers, forked from one that made one; a test making one per test) reads them again only when a file changed.
_CURRENT: dict[Path, tuple[tuple[int, int], tuple[int, int]]] = {}


def _stat(path: Path) -> tuple[int, int] | None:
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return found.st_mtime_ns, found.st_size


def compile_catalogs(folder: Path = TRANSLATIONS) -> list[Path]:
    """Compile every `.po` under `folder` into the `.mo` beside it, writing only those that differ.

    Safe to run from several processes at once: each writes its own temporary file and
    renames it into place.
    """
    written = []
    for po in sorted(folder.glob("*/LC_MESSAGES/*.po")):
        mo = po.with_suffix(".mo")
        if _CURRENT.get(po) == (_stat(po), _stat(mo)):
            continue
        po_stat = _stat(po)   # before the read: a change after it is seen next time
        source = po.read_bytes()
        catalog = read_po(io.BytesIO(source), locale=po.parts[-3])
        if b"POT-Creation-Date:" not in source:
            # Babel stamps a catalog without that header with the minute it reads it, so the same file compiled a
            # minute later would differ and be written again: a fixed date keeps the output a function of the file
            catalog.creation_date = UNDATED
        compiled = io.BytesIO()
        write_mo(compiled, catalog)
        if mo.is_file() and mo.read_bytes() == compiled.getvalue():
            _CURRENT[po] = (po_stat, _stat(mo))
            continue
        try:
            _write_atomically(mo, lambda out, data=compiled.getvalue(): out.write(data))
        except OSError as exc:
            raise ConfigError(f"cannot write the compiled catalog {mo} ({exc.strerror}): the app compiles "
                              f"{TRANSLATIONS} when it starts, so that folder must be writable by it (or "
                              "start the app once where it is, before making it read-only)") from exc
        written.append(mo)
        _CURRENT[po] = (po_stat, _stat(mo))
    return written


def template_globals() -> dict:
    return {"languages": LANGUAGES, "current_language": str(get_locale()),
            "html_lang": str(get_locale()).replace("_", "-"), "common_zones": COMMON_ZONES,
            "current_zone": select_timezone()}


def init_app(app: Flask) -> None:
    compile_catalogs()
    app.config.setdefault("BABEL_TRANSLATION_DIRECTORIES", str(TRANSLATIONS))
    app.config.setdefault("BABEL_DEFAULT_LOCALE", DEFAULT_LANGUAGE)
    Babel(app, locale_selector=select_locale, timezone_selector=select_timezone)
    app.context_processor(template_globals)

