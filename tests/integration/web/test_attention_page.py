"""Every row of the attention page says why the task needs a person and what to do next, and the actions are
controls: a failed task's retry is a button, the others lead to the page where they are done."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from pipeline import keys
from pipeline.core.errors import Ambiguous, Permanent
from testkit.helpers import OPERATOR, lesson
from testkit.pages import page, sign_in


class Rows(HTMLParser):
    """The attention table's rows: each cell's text, and the buttons and links in its last cell."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: list[dict] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "tr" and "data-problem" in attrs:
            self.rows.append({"problem": attrs["data-problem"], "task": int(attrs["data-task"]), "cells": [],
                              "controls": []})
        elif tag == "td" and self.rows:
            self.cell = []
            self.rows[-1]["cells"].append(self.cell)
        elif tag in ("button", "a") and self.rows and self.cell is not None and len(self.rows[-1]["cells"]) == 7:
            self.rows[-1]["controls"].append((tag, attrs.get("formaction") or attrs.get("href")))

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def test_every_attention_row_has_a_reason_and_a_next_step_and_a_failed_ones_retry_is_a_button(app, api, work,
                                                                                              tokens, conn):
    # given: one task per problem a person can meet
    created = api.create(2)
    tasks = api.tasks_of(created)
    work.executor.script[tasks["image:b1"]["id"]] = [Permanent("the prompt is not allowed")]
    work.executor.script[tasks["image:b2"]["id"]] = [Ambiguous("connection lost after the request was sent")]
    work.until_idle()
    other = api.post("/api/contents", json=lesson(2, prefix="其他"), role="editor").json
    paused, late = api.tasks_of(other)["tts:b1"], api.tasks_of(other)["image:b2"]
    conn.execute("UPDATE tasks SET status = 'retry', waiting_for = 'budget', last_error = 'busy (BudgetReached: "
                 "paused: daily budget reached)', last_error_code = 'budget' WHERE id = %s", (paused["id"],))
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 minute' WHERE id = %s", (late["id"],))
    gone, token = keys.create(conn, "leaver@example.com", "editor")
    api.tokens["leaver"] = token
    api.post("/api/contents", json=lesson(1, prefix="离开"), role="leaver")
    keys.revoke(conn, gone.id)
    keys.cancel_pending(conn, gone.id, by=OPERATOR)
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    # when
    parser = Rows()
    parser.feed(page(client, "/attention"))
    # then: every problem is there, each row with words in its "why" cell and a control in its last one
    assert {r["problem"] for r in parser.rows} == {"failed", "unknown", "budget", "stuck", "revoked"}
    for row in parser.rows:
        why, actions = "".join(row["cells"][4]).strip(), row["controls"]
        assert why and actions, row
    failed = next(r for r in parser.rows if r["problem"] == "failed")
    assert failed["controls"] == [("button", f"/tasks/{failed['task']}/retry")]
    unknown = next(r for r in parser.rows if r["problem"] == "unknown")
    assert all(href.startswith(f"/tasks/{unknown['task']}") for _, href in unknown["controls"])
    # and the retry button retries that task and comes back to the list
    answer = client.post(f"/tasks/{failed['task']}/retry", data={"csrf_token": csrf, "back": "/attention"})
    assert answer.status_code == 303 and answer.headers["Location"].endswith("/attention")
    assert api.get(f"/api/tasks/{failed['task']}").json["status"] in ("ready", "running", "succeeded")
    assert re.search(r"/attention$", answer.headers["Location"])
