"""The OpenAPI document as the API's contract: a documented operation's query parameters and JSON body are
checked against the document (web.openapi) before its view does anything, and the first thing that breaks a
rule is a 422 naming the field (a body that is not JSON stays a 400: web.inputs). So every constraint the
document states is enforced in one place, and a client that follows the document is never surprised.
`check_request` runs once the caller is known (web.auth.require, after the key: a call without a key is a 401
whatever it sends) and at the start of the media view, whose signed links need no key.

The check knows the few JSON Schema keywords the document uses for requests (type, enum, const, minimum,
maximum, minLength, maxLength, pattern, minItems, maxItems, items, required, properties,
additionalProperties: false, if/then, $ref); tests/integration/web/test_openapi.py keeps the document from
using others in a request. The views keep their own
checks, which the pages share; this module must not decide anything else (who may call, what exists).
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from typing import Any

from flask import Flask, current_app, request

from pipeline import versions
from pipeline.core.content import UNSTORABLE
from pipeline.core.errors import InvalidInput
from web import inputs, openapi

_PLACEHOLDER = re.compile(r"<(?:[a-z]+:)?([a-z_0-9]+)>")
KEYWORDS = {"type", "enum", "const", "minimum", "maximum", "minLength", "maxLength", "pattern", "minItems",
            "maxItems", "items", "required", "properties", "additionalProperties", "if", "then", "$ref",
            "description", "default", "examples", "readOnly"}   # the last four only annotate
_WHAT = {"string": "a string", "integer": "a whole number", "number": "a number", "boolean": "true or false",
         "array": "a list", "object": "an object", "null": "null"}


def init_app(app: Flask) -> None:
    """The app's document (its locales are those of its speech provider), served and enforced."""
    doc = app.extensions["openapi"] = openapi.document(versions.speakable(app.config["SETTINGS"]))
    app.extensions["openapi_operations"] = {(path, method): operation for path, ops in doc["paths"].items()
                                            for method, operation in ops.items()}


@lru_cache(maxsize=256)
def document_path(rule: str) -> str:
    """The document's path of a URL rule: /api/tasks/<id:task_id> is /api/tasks/{task_id}."""
    return _PLACEHOLDER.sub(r"{\1}", rule)


def check_request() -> None:
    """InvalidInput (422) at the first rule of the document this request breaks; nothing for an undocumented one."""
    if request.url_rule is None:
        return
    key = (document_path(request.url_rule.rule), request.method.lower())
    operation = current_app.extensions["openapi_operations"].get(key)
    if operation is None:
        return
    for param in operation.get("parameters", ()):
        if param["in"] == "query":
            check_query(param["name"], param["schema"])
    if "requestBody" in operation:
        content = operation["requestBody"]
        body = inputs.json_body(required=content.get("required", False))   # {} when absent and optional
        check(body, content["content"]["application/json"]["schema"], "")


def check_query(name: str, schema: dict) -> None:
    """A query parameter, sent at most once, as its schema says; absent is fine (none is required)."""
    values = request.args.getlist(name)
    if not values:
        return
    if len(values) > 1:
        raise InvalidInput(f"{name} is given {len(values)} times; send it once", field=name)
    value: Any = values[0]
    if schema.get("type") == "integer":
        value = inputs.whole(value, name, low=schema.get("minimum", 0), high=schema.get("maximum", inputs.MAX_ROW_ID))
    check(value, schema, name)


def check(value: Any, schema: dict, field: str) -> None:
    """InvalidInput naming `field` (a path such as blocks[2].text; "" is the body) at the first rule `value`
    breaks."""
    if "$ref" in schema:
        schema = current_app.extensions["openapi"]["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    name = field or "the body"
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(is_type(value, t) for t in types):
            raise InvalidInput(f"{name} must be {' or '.join(_WHAT[t] for t in types)}", field=field or "body")
    if "enum" in schema and not any(same(value, choice) for choice in schema["enum"]):
        raise InvalidInput(f"{name} must be one of: {', '.join(shown(c) for c in schema['enum'])}", field=field)
    if "const" in schema and not same(value, schema["const"]):
        raise InvalidInput(f"{name} must be {shown(schema['const'])}", field=field)
    if isinstance(value, str):
        check_text(value, schema, name)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = schema.get("minimum", -math.inf), schema.get("maximum", math.inf)
        if not low <= value <= high:
            raise InvalidInput(f"{name} is {shown(value)}; it must be from {low} to {high}", field=field)
    elif isinstance(value, list):
        check_list(value, schema, field)
    elif isinstance(value, dict):
        check_object(value, schema, field)
    if "if" in schema and holds(value, schema["if"]):
        check(value, schema["then"], field)


def holds(value: Any, schema: dict) -> bool:
    try:
        check(value, schema, "")
    except InvalidInput:
        return False
    return True


def check_text(value: str, schema: dict, name: str) -> None:
    if len(value) < schema.get("minLength", 0):
        raise InvalidInput(f"{name} must not be empty", field=name)
    if len(value) > schema.get("maxLength", len(value)):
        raise InvalidInput(f"{name} is {len(value)} characters; the limit is {schema['maxLength']}", field=name)
    if "pattern" in schema and not ecma(schema["pattern"]).search(value):
        if UNSTORABLE.search(value):
            raise InvalidInput(f"{name} holds a NUL character or an unpaired surrogate; remove it", field=name)
        if not value.strip():
            raise InvalidInput(f"{name} must hold some text, not only spaces", field=name)
        hint = f" ({schema['description']})" if "description" in schema else ""
        raise InvalidInput(f"{name} {shown(value)} does not match {schema['pattern']}{hint}", field=name)


@lru_cache(maxsize=64)
def ecma(pattern: str) -> re.Pattern:
    r"""A pattern of the document as JSON Schema reads it (ECMA-262), where a final $ matches only at the end;
    Python's also matches before a final newline, and would take "b1\n" for a block key. The document keeps to
    escapes both read alike (\xNN, \uNNNN, explicit classes)."""
    return re.compile(pattern[:-1] + r"\Z" if pattern.endswith("$") and not pattern.endswith("\\$") else pattern)


def check_list(value: list, schema: dict, field: str) -> None:
    name = field or "the body"
    if len(value) < schema.get("minItems", 0):
        raise InvalidInput(f"{name} must be a non-empty list" if schema["minItems"] == 1 else
                           f"{name} has {len(value)} items; at least {schema['minItems']} are needed",
                           field=field or "body")
    if len(value) > schema.get("maxItems", len(value)):
        raise InvalidInput(f"{name} has {len(value)} items; the limit is {schema['maxItems']}", field=field or "body")
    for i, item in enumerate(value):
        if "items" in schema:
            check(item, schema["items"], f"{field}[{i}]")


def check_object(value: dict, schema: dict, field: str) -> None:
    prefix = f"{field}." if field else ""
    properties = schema.get("properties", {})
    for required in schema.get("required", ()):
        if required not in value:
            raise InvalidInput(f"{prefix}{required} is required", field=prefix + required)
    for key, item in value.items():
        if key in properties:
            check(item, properties[key], prefix + key)
        elif schema.get("additionalProperties") is False:
            raise InvalidInput(f"{prefix}{shown(key)} is not a field of this call; the fields are "
                               f"{', '.join(properties)}", field=prefix + key)


def is_type(value: Any, kind: str) -> bool:
    if kind == "integer":   # 3.0 is a float in Python, a whole number in JSON (web.JSONProvider reads it as 3)
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, {"string": str, "boolean": bool, "array": list, "object": dict,
                              "null": type(None)}[kind])


def same(a: Any, b: Any) -> bool:
    """JSON equality: true is not 1."""
    return type(a) is type(b) and a == b


def shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:60] + "…"
