"""Fuzzing the HTTP API from its OpenAPI document: no generated request makes the server answer 5xx.

Needs schemathesis (a development dependency); skips where it is not installed. Operations
are driven one by one with Hypothesis (schemathesis' own pytest plugin does not support the
pytest we pin), each operation a test of its own (so parallel runs share them out, instead of one
test of every operation ending the run alone), on an app and database of its own that already hold
contents, versions and tasks for the generated ids to find.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance, response_schema_conformance, status_code_conformance)

from testkit.helpers import lesson  # noqa: E402
from testkit.webapp import make_app  # noqa: E402
from web import openapi  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = 150
# no 5xx, and every answer's status, type and body as the document says
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
METHODS = ("get", "put", "post", "delete", "patch")
# every operation schemathesis finds in the document (it leaves out the document's own path), but /readyz, whose
# 503 is its answer when a dependency is away
OPERATIONS = [f"{method.upper()} {path}" for path, methods in openapi.document()["paths"].items()
              for method in methods if method in METHODS and path not in ("/readyz", "/api/openapi.json")]


def fuzz(operation, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)
    check()


def fuzzed_app(database_url, redis_url, media_dir, token: str):
    """The app with admission and the key's own limits far away, so a deliberate 503 or 429 cannot mask a real
    5xx; with three contents saved (ids 1 to 3, the small ids generated most often: one of a block, one of three,
    one in the bulk lane), as the fuzzing of the save left them when one database served every operation."""
    app = make_app(database_url, redis_url, media_dir, MAX_PENDING_TASKS="100000000",
                   KEY_MAX_PENDING_TASKS="100000000", KEY_SAVES_PER_MINUTE="1000000")
    client = app.test_client()
    for body in (lesson(1), lesson(3, prefix="b"), {**lesson(2, prefix="c"), "priority": "bulk"}):
        response = client.post("/api/contents", json=body, headers={"X-API-Key": token})
        assert response.status_code == 202, response.json
    return app


def test_the_fuzzed_operations_are_every_operation_the_served_document_has(database_url, redis_url, media_dir):
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", make_app(database_url, redis_url, media_dir))
    served = {result.ok().label for result in schema.get_all_operations()}
    assert len(served) >= 15
    assert served - {"GET /readyz"} == set(OPERATIONS)


@pytest.mark.parametrize("label", OPERATIONS)
def test_no_generated_request_gets_a_server_error(label, database_url, redis_url, media_dir, tokens):
    app = fuzzed_app(database_url, redis_url, media_dir, tokens["admin"])
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app)
    fuzz(schema.find_operation_by_label(label), {"X-API-Key": tokens["admin"]})
