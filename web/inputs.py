"""Reading requests: JSON bodies, headers and path ids, with errors that name what to fix.

Path ids are matched by converters that only accept numbers the database columns can
hold, so an absurd id is a 404, never a database error. JSON nested deeper than
MAX_JSON_DEPTH (a content body needs 3 levels) is a 400, whatever the depth: the parser's
own recursion limit is caught too, so 100,000 opening brackets never reach a 500.
"""

from __future__ import annotations

import re
from typing import Any

from flask import Flask, request, url_for
from werkzeug.routing import BaseConverter

from pipeline.core.content import UNSTORABLE
from pipeline.core.errors import InvalidInput
from web.errors import Problem

_IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")
_DIGITS = re.compile(r"[0-9]{1,18}")   # ASCII only: str.isdigit and int() also take '²' or '٣'
MAX_ID = 2**63 - 1                     # a bigint row id
MAX_ROW_ID = 10**18 - 1                # the largest id a path or query takes: 18 digits (IdConverter, `whole`)
MAX_VERSION = 2_147_483_647            # an integer version number
MAX_OFFSET = 10_000                    # deeper pages are asked for by narrowing the search, not by offset
MAX_BODY_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 32
_TOO_DEEP = f"the JSON body is nested too deeply; at most {MAX_JSON_DEPTH} levels of arrays and objects are accepted"


class IdConverter(BaseConverter):
    """A bigint row id: 1 to 18 digits, no sign."""

    regex = r"[1-9][0-9]{0,17}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: Any) -> str:
        return str(int(value))


class VersionConverter(IdConverter):
    """A version number: fits PostgreSQL's integer."""

    regex = r"[1-9][0-9]{0,8}"


def init_app(app: Flask) -> None:
    app.url_map.converters["id"] = IdConverter
    app.url_map.converters["ver"] = VersionConverter
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES


def json_body(*, required: bool = True) -> Any:
    """The parsed JSON body; an empty body is {} when not required. Malformed JSON is a 400."""
    raw = request.get_data(cache=True)
    if not raw.strip():
        if required:
            raise Problem(400, "invalid_json", "send a JSON object body with Content-Type: application/json")
        return {}
    try:
        body = request.get_json(force=True, silent=True)
    except RecursionError:
        raise Problem(400, "json_too_deep", _TOO_DEEP) from None
    if body is None:
        raise Problem(400, "invalid_json", "the body is not valid JSON (UTF-8); check quotes and commas")
    if depth(body) > MAX_JSON_DEPTH:
        raise Problem(400, "json_too_deep", _TOO_DEEP)
    check_storable(body)
    return body


def depth(value: Any) -> int:
    """How deeply arrays and objects nest in a parsed JSON value (a scalar is 0); no recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, level)
            if level > MAX_JSON_DEPTH:
                return level
            stack.extend((child, level + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def check_storable(value: Any, path: str = "") -> None:
    """Refuse strings the database cannot store, naming where they are, before any rule sees them."""
    if isinstance(value, str):
        if UNSTORABLE.search(value):
            raise InvalidInput(f"{path or 'body'} holds a NUL character or an unpaired surrogate; remove it",
                               field=path or "body")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_storable(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            check_storable(item, f"{path}[{i}]")


def json_object(*, required: bool = True) -> dict:
    body = json_body(required=required)
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object", field="body")
    return body


def idempotency_key() -> str | None:
    key = request.headers.get("Idempotency-Key")
    if key is None:
        return None
    if not _IDEMPOTENCY_KEY.fullmatch(key):
        raise Problem(400, "invalid_header", "Idempotency-Key must be 1 to 200 visible ASCII characters, "
                                             "e.g. a UUID", field="Idempotency-Key")
    return key


def base_version(body: dict) -> int:
    value = body.get("base_version")
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2_147_483_647:
        raise InvalidInput("base_version is required: the version number your edit starts from", field="base_version")
    return value


def flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false", field=name)
    return value


def text(body: dict, name: str, limit: int) -> str:
    value = body.get(name)
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{name} is required and must be a non-empty string", field=name)
    if len(value) > limit:
        raise InvalidInput(f"{name} is {len(value)} characters; the limit is {limit}", field=name)
    return value.strip()


def whole(raw: str | None, name: str, *, low: int, high: int, what: str = "a whole number") -> int:
    """The one parser of integers from query strings and forms: ASCII digits only, within [low, high];
    InvalidInput naming the parameter otherwise."""
    if raw is None or not _DIGITS.fullmatch(raw) or not low <= int(raw) <= high:
        shown = raw if raw is None or len(raw) <= 40 else raw[:40] + "…"
        raise InvalidInput(f"{name}={shown!r} is not {what} from {low} to {high}", field=name)
    return int(raw)


def arg_int(name: str, default: int | None, *, low: int = 0, high: int = MAX_ID,
            what: str = "a whole number") -> int | None:
    """A query parameter's integer (`whole`), or `default` when the parameter is absent or empty."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return whole(raw, name, low=low, high=high, what=what)


def page_args(default_limit: int = 50, max_limit: int = 200) -> tuple[int, int]:
    """`limit` and `offset` of a list (`offset` at most MAX_OFFSET)."""
    return (arg_int("limit", default_limit, low=1, high=max_limit),
            arg_int("offset", 0, low=0, high=MAX_OFFSET))


def id_list(values: list[str], name: str) -> list[int]:
    """Row ids sent as a repeated form field; any that is not one is refused, naming it."""
    return [whole(value, name, low=1, high=MAX_ID, what="a row id") for value in values]


MAX_QUERY = 200


def search_query() -> str | None:
    """The `q` of a search (contents list): at most MAX_QUERY characters of storable text."""
    query = request.args.get("q", "").strip()
    if len(query) > MAX_QUERY:
        raise InvalidInput(f"q is {len(query)} characters; the limit is {MAX_QUERY}", field="q")
    check_storable(query, "q")
    return query or None


def safe_next(target: str | None) -> str:
    """Where a form sends the browser next: a local path it named, else the contents list. Only local paths: an
    open redirect would let a link send a signed-in editor anywhere."""
    if target and target.startswith("/") and not target.startswith("//"):
        return target
    return url_for("ui.contents.index")
