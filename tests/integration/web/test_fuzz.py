"""Fuzzing the HTTP API from its OpenAPI document: no generated request makes the server answer 5xx.

Needs schemathesis (a development dependency); skips where it is not installed. Operations
are driven one by one with Hypothesis (schemathesis' own pytest plugin does not support the
pytest we pin), against one app and database for the whole run.
"""

from __future__ import annotations

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from schemathesis.checks import not_a_server_error  # noqa: E402
from schemathesis.specs.openapi.checks import (  # noqa: E402
    content_type_conformance, response_schema_conformance, status_code_conformance)

from testkit.webapp import make_app  # noqa: E402

pytestmark = pytest.mark.slow
EXAMPLES = 150
# no 5xx, and every answer's status, type and body as the document says
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]


def fuzz(operation, headers: dict[str, str]) -> None:
    @given(case=operation.as_strategy())
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(case) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)
    check()


def test_no_generated_request_gets_a_server_error(database_url, redis_url, media_dir, tokens):
    # admission and the key's own limits far away, so a deliberate 503 or 429 cannot mask a real 5xx
    app = make_app(database_url, redis_url, media_dir, MAX_PENDING_TASKS="100000000",
                   KEY_MAX_PENDING_TASKS="100000000", KEY_SAVES_PER_MINUTE="1000000")
    schema = schemathesis.openapi.from_wsgi("/api/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15
    for operation in operations:
        if operation.path == "/readyz":
            continue  # its 503 is its answer when a dependency is away
        fuzz(operation, {"X-API-Key": tokens["admin"]})
