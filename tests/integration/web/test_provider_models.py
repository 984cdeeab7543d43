"""The provider's models as they are today, met at run time and at the save: a model that goes away while we run
fails its tasks at once, one call each, and lands on the attention list with its fix; a block too long for the
speech model is refused at the save, naming the block, its length and the limit."""

from __future__ import annotations

from datetime import date

from testkit.helpers import lesson
from testkit.pages import page, sign_in
from testkit.webapp import api_and_work


def openai_speech(fake) -> dict:
    return {"TTS_PROVIDER": "openai", "TTS_BASE_URL": f"{fake.base_url}/v1", "TTS_API_KEY": "sk-speech-test",
            "TTS_DAILY_BUDGET": "5"}


def test_a_model_the_provider_stops_serving_fails_each_task_after_one_call_and_asks_for_a_live_model(
        database_url, redis_url, media_dir, tokens, fake):
    # given: the narration model, live when the workers started, shut down by the provider while they run
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, providers=True, **openai_speech(fake))
    fake.set_today(date(2027, 1, 6))
    # when: a two-block lesson is made
    created = api.create(2)
    work.until_idle()
    # then: each narration failed at its first attempt, after exactly one call, with its own reason
    tasks = api.tasks_of(created)
    narrations = [tasks["tts:b1"], tasks["tts:b2"]]
    assert [(t["status"], t["attempts"]) for t in narrations] == [("failed", 1), ("failed", 1)]
    assert sorted(fake.stats()["keys"][k]["requests"] for k in fake.stats()["keys"]) == [1, 1]
    assert fake.stats()["executions_total"] == 0
    assert {tasks["image:b1"]["status"], tasks["image:b2"]["status"]} == {"succeeded"}
    # and: the attention list groups them apart from other failures, with the fix
    listed = api.get("/api/attention?problem=model_gone").json
    assert sorted(item["id"] for item in listed["items"]) == sorted(t["id"] for t in narrations)
    assert {tuple(item["actions"]) for item in listed["items"]} == {("set_live_model", "retry")}
    assert listed["counts"]["model_gone"] == 2 and listed["counts"]["failed"] == 0
    # and: the editor reads it in their language, on the list and on the task's page
    client = api.client
    sign_in(client, tokens["editor"])
    client.post("/preferences", data={"lang": "zh_Hans", "next": "/attention",
                                      "csrf_token": sign_in(client, tokens["editor"])})
    listing = page(client, "/attention?problem=model_gone")
    assert 'data-problem="model_gone"' in listing and "服务商已不再提供它的模型" in listing
    assert "服务商已不再提供这个模型" in page(client, f"/tasks/{narrations[0]['id']}")


def test_a_block_too_long_for_the_speech_model_is_refused_at_the_save_naming_block_length_and_limit(
        database_url, redis_url, media_dir, tokens, fake, conn):
    api, _ = api_and_work(database_url, redis_url, media_dir, tokens, providers=True, **openai_speech(fake))
    body = lesson(2)
    body["blocks"][1]["text"] = "春" * 1200   # about 2,400 tokens at most: over gpt-4o-mini-tts's 2,000
    before = conn.execute("SELECT count(*) AS n FROM versions").fetchone()["n"]
    refused = api.post("/api/contents", json=body, role="editor")
    assert refused.status_code == 422
    assert refused.json["error"]["field"] == "blocks[1].text"
    assert "blocks[1] (b2)" in refused.json["error"]["message"] and "1200 characters" in refused.json["error"]["message"]
    assert "at most 2000 tokens" in refused.json["error"]["message"]
    assert conn.execute("SELECT count(*) AS n FROM versions").fetchone()["n"] == before   # nothing was written
    body["blocks"][1]["text"] = "春" * 900
    assert api.post("/api/contents", json=body, role="editor").status_code == 202


def test_the_editor_shows_a_too_long_block_where_it_is(database_url, redis_url, media_dir, tokens, fake):
    api, _ = api_and_work(database_url, redis_url, media_dir, tokens, providers=True, **openai_speech(fake))
    client = api.client
    csrf = sign_in(client, tokens["editor"])
    response = client.post("/contents/new", data={
        "csrf_token": csrf, "title": "长段落", "locale": "zh-CN", "block_key": ["a", "b"],
        "block_text": ["短的一段。", "春" * 1200], "block_prompt": ["", ""]})
    html = response.get_data(as_text=True)
    assert response.status_code == 422
    second = html.split('data-block>')[2]
    assert 'aria-invalid="true"' in second and 'id="block-error"' in second
    assert 'aria-invalid="true"' not in html.split('data-block>')[1]
