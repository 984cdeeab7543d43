"""The OpenAPI document is the API's contract (web.contract): a request that breaks one of its rules is a 422 naming
the parameter or field, after the key is checked, and changes nothing. These are the cases Schemathesis found the
API accepting or failing on before the contract was enforced (tests/integration/web/test_fuzz.py runs it whole)."""

from __future__ import annotations

import pytest

from pipeline.core.errors import Permanent
from pipeline.core.records import MAX_NOTE
from testkit.helpers import lesson


def failed_task(api, work) -> dict:
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Permanent("refused")]
    work.until_idle()
    return api.tasks_of(created)["image:b1"]


def refused(response, field: str) -> str:
    assert response.status_code == 422, response.json
    assert response.json["error"]["code"] == "invalid_input" and response.json["error"]["field"] == field
    return response.json["error"]["message"]


def test_a_bulk_retry_with_a_note_over_its_limit_is_refused_and_retries_nothing(api, work, conn):
    # given a failed task; when a bulk retry carries a note longer than the document allows
    task = failed_task(api, work)
    response = api.post("/api/attention/retry", role="editor", json={"task_ids": [task["id"]], "note": "n" * (MAX_NOTE + 1)})
    # then it is refused naming the note, and the task is still failed
    assert f"the limit is {MAX_NOTE}" in refused(response, "note")
    assert conn.execute("SELECT status FROM tasks WHERE id = %s", (task["id"],)).fetchone()["status"] == "failed"


@pytest.mark.parametrize("query, field", [
    ("problem=", "problem"), ("kind=sound", "kind"), ("limit=", "limit"), ("limit=5&limit=0", "limit"),
    ("offset=-1", "offset"), ("content_id=0", "content_id")])
def test_an_attention_query_outside_the_document_is_refused_naming_the_parameter(api, query, field):
    refused(api.get(f"/api/attention?{query}", role="editor"), field)


@pytest.mark.parametrize("query, field", [("q=" + "x" * 201, "q"), ("q=a%00b", "q"), ("before=", "before"),
                                          ("offset=1&offset=2", "offset")])
def test_a_search_outside_the_document_is_refused_naming_the_parameter(api, query, field):
    refused(api.get(f"/api/contents?{query}", role="editor"), field)


@pytest.mark.parametrize("query, field", [("c=0", "c"), ("v=0", "v"), ("name=" + "n" * 121, "name"),
                                          ("expires=soon", "expires")])
def test_a_media_links_parameters_outside_the_document_are_refused_even_for_a_stored_file(api, work, query, field):
    created = api.create(1)
    work.until_idle()
    sha256 = api.tasks_of(created)["image:b1"]["sha256"]
    refused(api.get(f"/media/{sha256}?{query}", role="editor"), field)


@pytest.mark.parametrize("body, field", [
    ({"theme": "旅行", "scenario": [{}]}, "scenario"), ({"theme": "旅行", "locale": None}, "locale"),
    ({"theme": "旅行", "scenario": None}, "scenario")])
def test_a_demo_job_outside_the_document_is_refused_and_saves_nothing(api, conn, body, field):
    refused(api.post("/api/jobs", role="editor", json=body), field)
    assert conn.execute("SELECT count(*) AS n FROM contents").fetchone()["n"] == 0


def test_a_field_the_document_does_not_name_is_refused_not_ignored(api, conn):
    # a misspelt "priority" would otherwise save an import in the editors' lane
    message = refused(api.post("/api/contents", role="editor", json={**lesson(1), "prioirty": "bulk"}), "prioirty")
    assert "priority" in message   # the fields the call takes are listed
    nested = {**lesson(1), "blocks": [{"key": "b1", "text": "x", "imageprompt": "a cat"}]}
    refused(api.post("/api/contents", role="editor", json=nested), "blocks[0].imageprompt")
    assert conn.execute("SELECT count(*) AS n FROM contents").fetchone()["n"] == 0


def test_text_that_is_only_spaces_or_holds_nul_is_refused_naming_the_field(api):
    assert "only spaces" in refused(api.post("/api/contents", role="editor", json={**lesson(1), "title": " \x1f "}),
                                    "title")
    refused(api.post("/api/contents", role="editor", json={**lesson(1), "title": "a\x00b"}), "title")


def test_a_regeneration_with_consent_needs_a_reason_and_without_consent_says_what_it_would_cost(api, work):
    created = api.create(1)
    work.until_idle()
    image = api.tasks_of(created)["image:b1"]
    refused(api.post(f"/api/tasks/{image['id']}/regenerate", role="editor", json={"accept_new_charge": True}),
            "reason")
    unconfirmed = api.post(f"/api/tasks/{image['id']}/regenerate", role="editor")
    assert unconfirmed.status_code == 409 and unconfirmed.json["error"]["code"] == "new_charge_unconfirmed"


def test_a_call_without_a_key_is_a_401_whatever_it_sends(api):
    # the key first: a request that breaks the document is still a 401 without one, and a 403 for the wrong role
    assert api.get("/api/attention?problem=nonsense", role=None).status_code == 401
    assert api.post("/api/contents", role="reviewer", json={"nonsense": True}).status_code == 403
