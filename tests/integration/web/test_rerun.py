"""Rerunning a dead-lettered task: a new run pointing at the dead letter it repeats, the dead letter kept,
the deadline moved only when asked, admission passed like any work added. The stored names are those from
before the rerun had its own (the table replays, dead_letters.replayed_by, the event dead_letter_replayed)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from pipeline import runtime
from pipeline.core.errors import Permanent
from testkit.pages import Forms, page, post, sign_in
from testkit.webapp import api_and_work


def failed_image(api, work, created) -> int:
    """The lesson's image, refused by the provider: failed with a dead letter."""
    image = api.tasks_of(created)["image:b1"]["id"]
    work.executor.script[image] = [Permanent("refused")]
    work.until_idle()
    assert api.tasks_of(created)["image:b1"]["status"] == "failed"
    return image


def rerun(api, task_id: int, **body):
    return api.post(f"/api/tasks/{task_id}/rerun", role="editor", json=body)


def test_a_rerun_is_a_new_run_pointing_at_the_kept_dead_letter_with_who_and_why(api, work, conn):
    created = api.create(1)
    image = failed_image(api, work, created)
    letter = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s", (image,)).fetchone()
    deadline = conn.execute("SELECT deadline_at FROM tasks WHERE id = %s", (image,)).fetchone()["deadline_at"]
    # when an editor reruns it, saying why
    response = rerun(api, image, why="the provider fixed its filter")
    assert response.status_code == 202 and response.headers["Location"] == f"/api/tasks/{image}"
    body = response.json
    assert (body["rerun_of"], body["first_attempt"], body["max_attempts"], body["status"]) == (letter["id"], 2, 4,
                                                                                                "ready")
    # then the dead letter is kept, marked with who reran it, when and why
    kept = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s", (image,)).fetchall()
    assert len(kept) == 1 and kept[0]["reason"] == "permanent error"
    assert (kept[0]["replayed_by"], kept[0]["replay_why"]) == ("editor@example.com", "the provider fixed its filter")
    assert kept[0]["replayed_at"] is not None
    record = conn.execute("SELECT * FROM replays WHERE task_id = %s", (image,)).fetchone()
    assert (record["replay_of"], record["first_attempt"], record["replayed_by"]) == (letter["id"], 2,
                                                                                       "editor@example.com")
    # and the deadline did not move, since nobody asked
    assert record["deadline_before"] == record["deadline_after"] == deadline
    assert conn.execute("SELECT deadline_at FROM tasks WHERE id = %s", (image,)).fetchone()["deadline_at"] == deadline
    event = conn.execute("SELECT * FROM events WHERE action = 'dead_letter_replayed'").fetchone()
    assert (event["actor"], event["from_status"], event["to_status"], event["reason"]) == (
        "editor@example.com", "failed", "ready", "the provider fixed its filter")
    assert event["details"]["replay_of"] == letter["id"] and event["details"]["deadline_extended"] is False
    # the new run succeeds, and the task's history shows both runs
    work.until_idle()
    doc = api.get(f"/api/tasks/{image}").json
    assert (doc["status"], doc["attempts"]) == ("succeeded", 2)
    runs = doc["runs"]
    assert [(r["run"], r["first_attempt"]) for r in runs] == [(1, 1), (2, 2)]
    assert runs[0]["dead_letter"]["id"] == letter["id"] and runs[1]["rerun"]["rerun_of"] == letter["id"]
    assert runs[1]["dead_letter"] is None
    assert api.tasks_of(created)["bundle:"]["status"] == "succeeded"


def test_a_rerun_past_the_deadline_needs_an_explicit_extension_which_is_recorded(api, work, conn):
    created = api.create(1)
    image = failed_image(api, work, created)
    bundle = api.tasks_of(created)["bundle:"]["id"]
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 second' WHERE id IN (%s, %s)", (image, bundle))
    before = conn.execute("SELECT * FROM tasks WHERE id = %s", (image,)).fetchone()
    # without an extension: refused, nothing changed
    refused = rerun(api, image, why="try again")
    assert refused.status_code == 409 and refused.json["error"]["code"] == "deadline_passed"
    assert "extend_deadline_seconds" in refused.json["error"]["message"]
    after = conn.execute("SELECT * FROM tasks WHERE id = %s", (image,)).fetchone()
    assert (after["status"], after["deadline_at"], after["max_attempts"]) == ("failed", before["deadline_at"],
                                                                              before["max_attempts"])
    assert conn.execute("SELECT replayed_at FROM dead_letters WHERE task_id = %s", (image,)).fetchone()[
        "replayed_at"] is None
    # with one hour asked for: the task and its waiting bundle get it, and the rerun records both deadlines
    asked_at = datetime.now(timezone.utc)
    response = rerun(api, image, why="try again", extend_deadline_seconds=3600)
    assert response.status_code == 202
    record = conn.execute("SELECT * FROM replays WHERE task_id = %s", (image,)).fetchone()
    assert record["deadline_before"] == before["deadline_at"]
    assert abs(record["deadline_after"] - (asked_at + timedelta(hours=1))) < timedelta(seconds=30)
    moved = {r["id"]: r["deadline_at"] for r in conn.execute("SELECT id, deadline_at FROM tasks WHERE id IN (%s, %s)",
                                                                (image, bundle)).fetchall()}
    assert moved == {image: record["deadline_after"], bundle: record["deadline_after"]}
    event = conn.execute("SELECT details FROM events WHERE action = 'dead_letter_replayed'").fetchone()["details"]
    assert event["deadline_extended"] is True and event["dependents_extended"] == [bundle]
    work.until_idle()
    assert api.tasks_of(created)["bundle:"]["status"] == "succeeded"


def test_a_task_failing_again_after_a_rerun_gets_a_new_dead_letter_and_its_page_shows_the_chain(
        app, api, work, conn, tokens):
    created = api.create(1)
    image = failed_image(api, work, created)
    assert rerun(api, image, why="first try again").status_code == 202
    work.executor.script[image] = [Permanent("refused again")]
    work.until_idle()
    letters = conn.execute("SELECT * FROM dead_letters WHERE task_id = %s ORDER BY id", (image,)).fetchall()
    assert [(l["replayed_by"] is not None) for l in letters] == [True, False]   # one kept, one open
    # only the open one waits for a person: the rerun one is history, not counted again
    assert api.scrape()[("mediapipe_dead_letters", (("reason", "permanent error"),))] == 1
    # a second rerun, from the task page's form
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    html = page(client, f"/tasks/{image}")
    form = next(f for f in Forms(html).forms if f["action"] == f"/tasks/{image}/rerun")
    assert {"why", "extend"} <= set(form["inputs"])
    response = post(client, csrf, f"/tasks/{image}/rerun", why="second try", extend="", back="task")
    assert response.status_code == 303 and response.headers["Location"] == f"/tasks/{image}"
    work.until_idle()
    html = page(client, f"/tasks/{image}")
    assert html.count('data-run="') == 3
    for text in ("first try again", "second try", f"dead letter {letters[0]['id']}", f"dead letter {letters[1]['id']}"):
        assert text in html
    chain = conn.execute("SELECT replay_of, first_attempt FROM replays WHERE task_id = %s ORDER BY id",
                         (image,)).fetchall()
    assert [(r["replay_of"], r["first_attempt"]) for r in chain] == [(letters[0]["id"], 2), (letters[1]["id"], 3)]
    assert conn.execute("SELECT status FROM tasks WHERE id = %s", (image,)).fetchone()["status"] == "succeeded"


def test_a_rerun_over_capacity_is_503_and_changes_nothing(database_url, redis_url, tmp_path, tokens, conn):
    # given: room for four pending tasks; a failed image whose bundle waits, and another lesson queued
    api, work = api_and_work(database_url, redis_url, tmp_path / "media", tokens, MAX_PENDING_TASKS="4")
    created = api.create(1)
    image = failed_image(api, work, created)
    api.create(1)   # three more pending: four in all, the limit
    events = conn.execute("SELECT count(*) AS n FROM events").fetchone()["n"]
    # when: an editor reruns the failed image
    response = rerun(api, image, why="try again", extend_deadline_seconds=60)
    # then: 503 with Retry-After, and nothing changed
    assert response.status_code == 503 and int(response.headers["Retry-After"]) >= 1
    assert response.json["error"]["code"] == "over_capacity"
    row = conn.execute("SELECT status, max_attempts FROM tasks WHERE id = %s", (image,)).fetchone()
    assert (row["status"], row["max_attempts"]) == ("failed", 3)
    assert conn.execute("SELECT count(*) AS n FROM replays").fetchone()["n"] == 0
    assert conn.execute("SELECT replayed_at FROM dead_letters WHERE task_id = %s", (image,)).fetchone()[
        "replayed_at"] is None
    assert conn.execute("SELECT count(*) AS n FROM events").fetchone()["n"] == events
    # once the queue drains, the same rerun is accepted
    work.until_idle()
    assert rerun(api, image, why="try again").status_code == 202
    runtime.install(None)


def test_reruns_that_cannot_be_made_are_refused_with_a_clear_code(api, work, conn):
    created = api.create(1)
    image = failed_image(api, work, created)
    tts = api.tasks_of(created)["tts:b1"]["id"]
    assert rerun(api, image).status_code == 422                                    # no why
    assert rerun(api, image, why=" ").json["error"]["field"] == "why"
    for bad in (0, -5, 604801, "3600", True, 1.5):
        response = rerun(api, image, why="x", extend_deadline_seconds=bad)
        assert response.status_code == 422 and response.json["error"]["field"] == "extend_deadline_seconds", bad
    assert rerun(api, tts, why="x").json["error"]["code"] == "invalid_transition"   # succeeded, not failed
    assert rerun(api, 987654, why="x").status_code == 404
    assert api.post(f"/api/tasks/{image}/rerun", role="reviewer", json={"why": "x"}).status_code == 403
    assert conn.execute("SELECT count(*) AS n FROM replays").fetchone()["n"] == 0


def test_the_rerun_answers_under_its_earlier_route_with_its_earlier_names_too(api, work, conn):
    # given a dead-lettered image
    image = failed_image(api, work, api.create(1))
    letter = conn.execute("SELECT id FROM dead_letters WHERE task_id = %s", (image,)).fetchone()["id"]
    # when a client written before the rename reruns it by the route it knew
    response = api.post(f"/api/tasks/{image}/replay", role="editor", json={"why": "an old script"})
    # then it is rerun, and the answer has the earlier names beside the new ones
    assert response.status_code == 202
    body = response.json
    record = conn.execute("SELECT id FROM replays WHERE task_id = %s", (image,)).fetchone()["id"]
    assert (body["rerun_id"], body["rerun_of"]) == (body["replay_id"], body["replay_of"]) == (record, letter)
    assert api.post(f"/api/tasks/{image}/replay", role="reviewer", json={"why": "x"}).status_code == 403


def test_a_page_loaded_before_the_rename_still_reruns_by_its_form(app, api, work, conn, tokens):
    # given a dead-lettered image and an editor signed in
    image = failed_image(api, work, api.create(1))
    client = app.test_client()
    csrf = sign_in(client, tokens["editor"])
    # when the form of a page loaded before the rename posts to the route it knew
    response = post(client, csrf, f"/tasks/{image}/replay", why="an open tab", extend="", back="task")
    # then the task is rerun
    assert response.status_code == 303 and response.headers["Location"] == f"/tasks/{image}"
    assert conn.execute("SELECT why FROM replays WHERE task_id = %s", (image,)).fetchone()["why"] == "an open tab"


def test_an_extension_written_with_a_fraction_is_its_whole_number_of_seconds(api, work):
    # JSON has one kind of number: 3600.0 is 3600, as an integer of the OpenAPI document counts it (and Schemathesis
    # sends it so); 1.5 is no whole number of seconds
    image = failed_image(api, work, api.create(1))
    half = rerun(api, image, why="x", extend_deadline_seconds=1.5)
    assert half.status_code == 422 and half.json["error"]["field"] == "extend_deadline_seconds"
    whole = rerun(api, image, why="provider fixed", extend_deadline_seconds=3600.0)
    assert whole.status_code == 202, whole.json
