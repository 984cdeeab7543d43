"""The `video` kind across versions, with the local providers as a worker runs them: a re-save renders a new video
and reuses every unchanged image and narration, and a save of inputs already rendered reuses that video without
rendering. (A lesson's video itself, delivered and played: tests/acceptance/test_lesson_video.py.)"""

from __future__ import annotations

from testkit.webapp import api_and_work, conn, media_dir, tokens  # noqa: F401

SIZE = (320, 180)
BLOCKS = [{"key": "b1", "text": "The library opens at eight.", "image_prompt": "a red library door"},
          {"key": "b2", "text": "Lunch is served in the hall.", "image_prompt": "a green dining hall"},
          {"key": "b3", "text": "Sports start after class.", "image_prompt": "a blue running track"}]


def lesson(blocks) -> dict:
    return {"title": "Campus day", "locale": "en-US", "theme": "campus", "blocks": blocks}


def test_a_re_save_renders_a_new_video_reusing_unchanged_media_and_known_inputs_reuse_their_video(
        database_url, redis_url, media_dir, tokens, conn):
    api, work = api_and_work(database_url, redis_url, media_dir, tokens, providers=True, VIDEO_ENABLED="true",
                             VIDEO_WIDTH=str(SIZE[0]), VIDEO_HEIGHT=str(SIZE[1]))
    first = api.post("/api/contents", json=lesson(BLOCKS), role="editor").json
    work.until_idle()
    before = api.tasks_of(first)
    paid = conn.execute("SELECT count(*) AS n FROM provider_calls WHERE outcome = 'succeeded'").fetchone()["n"]
    # when one block's text changes
    changed = [BLOCKS[0], {**BLOCKS[1], "text": "Lunch is served at noon."}, BLOCKS[2]]
    second = api.put(f"/api/contents/{first['content_id']}", json={**lesson(changed), "base_version": 1},
                     role="editor").json
    work.until_idle()
    after = api.tasks_of(second)
    # then only the changed block is paid for again (its narration; its picture comes from its prompt), every other
    # medium is the very asset of version 1, and the video is a new one
    assert conn.execute("SELECT count(*) AS n FROM provider_calls WHERE outcome = 'succeeded'").fetchone()["n"] \
        == paid + 1
    for ref in ("image:b1", "tts:b1", "image:b2", "image:b3", "tts:b3"):
        assert after[ref]["sha256"] == before[ref]["sha256"], ref
    assert after["tts:b2"]["sha256"] != before["tts:b2"]["sha256"]
    assert after["video:"]["status"] == "succeeded" and after["video:"]["sha256"] != before["video:"]["sha256"]
    # and a version back to the first one's inputs reuses the first video: no render, the same file
    third = api.put(f"/api/contents/{first['content_id']}", json={**lesson(BLOCKS), "base_version": 2},
                    role="editor").json
    work.until_idle()
    again = api.tasks_of(third)
    assert again["video:"]["sha256"] == before["video:"]["sha256"]
    reasons = [r["reason"] for r in conn.execute(
        "SELECT reason FROM events WHERE task_id = %s AND to_status = 'succeeded'", (again["video:"]["id"],))]
    assert reasons == ["reused"]
