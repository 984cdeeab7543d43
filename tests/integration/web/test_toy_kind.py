"""A new kind through the registry alone: a module naming its KIND, listed in KINDS_FROM, and bin/migrate's
registration of the kinds; nothing else of ours changes. It is planned for every block, queued, run by a worker,
shown on the version's status and delivered with the block's media."""

from __future__ import annotations

import json

import pytest

from pipeline import migrations
from pipeline.core import kinds
from testkit.webapp import api_and_work, conn, media_dir, tokens  # noqa: F401

pytestmark = pytest.mark.server_major   # it registers a kind's row, as bin/migrate does


@pytest.fixture
def registry(monkeypatch):
    """The registry as it is, restored after the test (a kind added here must not outlive it in this process)."""
    kinds.every()
    monkeypatch.setattr(kinds, "_REGISTRY", dict(kinds._REGISTRY))


def test_a_kind_added_by_its_module_alone_runs_end_to_end(registry, database_url, redis_url, media_dir, tokens,
                                                          conn):
    # given the toy kind's module named in KINDS_FROM, and bin/migrate's registration of the kinds
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, providers=True,
                             KINDS_FROM="testkit.toykind")
    assert "wordcount" in kinds.names()
    migrations.migrate(database_url)
    assert conn.execute("SELECT paid, shared FROM task_kinds WHERE name = 'wordcount'").fetchone() == {
        "paid": False, "shared": True}
    # when a lesson is saved and the workers run
    blocks = [{"key": "a", "text": "one two three"}, {"key": "b", "text": "four five"}]
    created = api.post("/api/contents", json={"title": "t", "locale": "en", "blocks": blocks}, role="editor").json
    work.until_idle()
    # then each block has its word count, made by a worker, and the bundle waited for them
    tasks = api.tasks_of(created)
    assert {ref: t["status"] for ref, t in tasks.items() if ref.startswith("wordcount")} == {
        "wordcount:a": "succeeded", "wordcount:b": "succeeded"}
    assert tasks["bundle:"]["status"] == "succeeded"
    # and the delivery carries it beside each block's image and narration
    assert api.approve(created).status_code == 200
    doc = api.delivery(created, role="reviewer").json
    counts = [json.loads(api.client.get(block["words"]["url"]).get_data()) for block in doc["blocks"]]
    assert counts == [{"words": 3}, {"words": 2}]
