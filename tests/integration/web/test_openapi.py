"""The OpenAPI document is true: every HTTP API route is in it, with its methods, and nothing else; every answer
an operation can get is listed; every rule it states for a request is one web.contract enforces."""

from __future__ import annotations

import json
import re

from pipeline.core.errors import Busy
from web import contract

DOCUMENTED_BLUEPRINTS = {"api", "media", "metrics", "openapi", "health"}
METHODS = {"get", "put", "post", "delete", "patch"}


def app_routes(app) -> set[tuple[str, str]]:
    found = set()
    for rule in app.url_map.iter_rules():
        if rule.endpoint.split(".")[0] not in DOCUMENTED_BLUEPRINTS:
            continue
        path = re.sub(r"<(?:[a-z]+:)?([a-z_0-9]+)>", r"{\1}", rule.rule)
        found |= {(path, m.lower()) for m in rule.methods - {"HEAD", "OPTIONS"}}
    return found


def document(api) -> dict:
    response = api.client.get("/api/openapi.json")
    assert response.status_code == 200 and response.mimetype == "application/json"
    return response.json


def test_every_route_is_in_the_openapi_document_and_vice_versa(app, api):
    doc = document(api)
    documented = {(path, method) for path, ops in doc["paths"].items() for method in ops if method in METHODS}
    assert app_routes(app) == documented


def test_every_path_parameter_is_declared_and_every_keyed_operation_documents_401_and_403(api):
    for path, ops in document(api)["paths"].items():
        placeholders = set(re.findall(r"{([a-z_0-9]+)}", path))
        for method, op in ops.items():
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == placeholders, (method, path)
            if op.get("security"):
                assert {"401", "403"} <= set(op["responses"]), (method, path)


def test_every_schema_reference_resolves(api):
    doc = document(api)
    refs = set(re.findall(r'"\$ref": "#/components/schemas/([A-Za-z]+)"', json.dumps(doc)))
    assert refs and refs <= set(doc["components"]["schemas"])


def test_the_ui_is_not_part_of_the_api_document(api):
    assert not any(path.startswith(("/contents", "/signin", "/tasks")) for path in document(api)["paths"])


def test_every_answer_an_operation_can_get_is_documented(api):
    # the server's own refusals anywhere; a key is looked up in PostgreSQL (503 when it cannot be); a body may be
    # malformed, too large or invalid; a path that names nothing is a 404
    for path, ops in document(api)["paths"].items():
        for method, op in ops.items():
            answers = set(op["responses"])
            assert {"414", "431"} <= answers, (method, path)
            if op.get("security"):
                assert {"401", "403", "503"} <= answers, (method, path)
            if "requestBody" in op:
                assert {"400", "413", "422"} <= answers, (method, path)
            if "{" in path:
                assert "404" in answers, (method, path)
            if any(p["in"] == "query" for p in op.get("parameters", [])):
                assert "422" in answers, (method, path)


def test_every_request_rule_is_one_the_api_enforces(api):
    # web.contract checks requests against the document, and knows these keywords only: a rule written with
    # another would be documented and never enforced
    doc = document(api)

    def keywords(schema: object) -> set[str]:
        if not isinstance(schema, dict):
            return set()
        if "$ref" in schema:
            return keywords(doc["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]])
        found = set(schema)
        for key in ("items", "additionalProperties", "if", "then"):
            found |= keywords(schema.get(key))
        for item in schema.get("properties", {}).values():
            found |= keywords(item)
        return found

    used = set()
    for ops in doc["paths"].values():
        for op in ops.values():
            used |= {k for p in op.get("parameters", []) if p["in"] == "query" for k in keywords(p["schema"])}
            if "requestBody" in op:
                used |= keywords(op["requestBody"]["content"]["application/json"]["schema"])
    assert used and used <= contract.KEYWORDS, used - contract.KEYWORDS


def test_every_wait_a_task_can_be_in_is_documented(api):
    # a five-minute Schemathesis run met a task waiting for a call slot, which the document did not name
    def kinds(cls: type) -> set[type]:
        return {cls}.union(*(kinds(sub) for sub in cls.__subclasses__()))
    waits = {cls.waiting_for for cls in kinds(Busy) if getattr(cls, "waiting_for", None)}
    documented = document(api)["components"]["schemas"]["Task"]["properties"]["waiting_for"]["enum"]
    assert waits and set(documented) == waits | {None}
