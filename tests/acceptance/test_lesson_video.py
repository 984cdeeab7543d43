"""A lesson's narrated video, from the outside: saved over HTTP, made by RQ worker processes (one per queue, the
`video` queue among them) with the local providers, approved, delivered; the delivered MP4 decoded (its length, the
picture during each narration, its caption track), and the board playing it in headless Chromium with its captions.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from pipeline import video
from pipeline.core import kinds
from testkit.helpers import wait_until
from testkit.system import rq_worker_argv
from testkit.videocheck import duration_of, seconds_of, shows_each_picture_during_its_narration
from testkit.webapp import TEST_ENV, make_app

ROOT = Path(__file__).resolve().parents[2]
SIZE = (320, 180)
VIDEO_ENV = {"VIDEO_ENABLED": "true", "VIDEO_WIDTH": str(SIZE[0]), "VIDEO_HEIGHT": str(SIZE[1])}
BLOCKS = [{"key": "b1", "text": "The library opens at eight.", "image_prompt": "a red library door"},
          {"key": "b2", "text": "Lunch is served in the hall.", "image_prompt": "a green dining hall"},
          {"key": "b3", "text": "Sports start after class.", "image_prompt": "a blue running track"}]
pytestmark = pytest.mark.slow


@pytest.fixture
def app(database_url, redis_url, media_dir):
    return make_app(database_url, redis_url, media_dir, **VIDEO_ENV)


@pytest.fixture
def workers(database_url, redis_url, media_dir, tmp_path):
    env = {**os.environ, **TEST_ENV, **VIDEO_ENV, "DATABASE_URL": database_url, "REDIS_URL": redis_url,
           "MEDIA_DIR": str(media_dir), "PYTHONPATH": str(ROOT)}
    log = (tmp_path / "workers.log").open("w")
    started = [subprocess.Popen([sys.executable, *rq_worker_argv(queue)], cwd=ROOT, env=env, stdout=log,
                                stderr=subprocess.STDOUT) for queue in kinds.names()]
    yield started
    for process in started:
        process.terminate()
    for process in started:
        process.wait(15)
    log.close()


def test_a_lesson_is_delivered_with_its_narrated_video_and_plays_with_captions_on_the_board(
        server, workers, tokens, chromium, shots):
    def call(method: str, path: str, role: str, **kw) -> requests.Response:
        return requests.request(method, f"{server}{path}", headers={"X-API-Key": tokens[role]}, timeout=30, **kw)

    def fetched(url: str) -> bytes:
        response = requests.get(f"{server}{url}", timeout=30)
        assert response.status_code == 200, url
        return response.content

    # given a three-block lesson saved over HTTP
    lesson = {"title": "Campus day", "locale": "en-US", "theme": "campus", "blocks": BLOCKS}
    created = call("POST", "/api/contents", "editor", json=lesson).json()
    # when the workers have made it, then every task succeeded, the video among them
    wait_until(lambda: call("GET", created["status_url"], "editor").json()["status"] == "complete", timeout=120,
               interval=0.5, message="the lesson is complete")
    tasks = {f"{t['kind']}:{t['block'] or ''}": t for t in call("GET", created["status_url"], "editor").json()["tasks"]}
    assert tasks["video:"]["status"] == "succeeded" and len(tasks) == 2 * len(BLOCKS) + 2
    # and once approved, the delivery holds the video and its captions
    assert call("POST", created["status_url"] + "/approve", "reviewer").status_code == 200
    doc = call("GET", f"/api/contents/{created['content_id']}/delivery", "reviewer").json()
    mp4 = fetched(doc["video"]["url"])
    narrations = [fetched(block["audio"]["url"]) for block in doc["blocks"]]
    pictures = [fetched(block["image"]["url"]) for block in doc["blocks"]]
    # its length is the narrations' sum within 0.1 s
    assert abs(duration_of(mp4) - sum(seconds_of(n) for n in narrations)) < 0.1
    # the frame in the middle of each block's narration is that block's picture, not another's
    for i, distances in enumerate(shows_each_picture_during_its_narration(mp4, pictures, narrations, SIZE)):
        assert distances.index(min(distances)) == i and distances[i] < 12, (i, distances)
    # its caption track holds each block's text, and the WebVTT file says the same
    assert [cue.text for cue in video.captions(mp4)] == [b["text"] for b in BLOCKS]
    captions = fetched(doc["video"]["captions_url"]).decode()
    assert captions.startswith("WEBVTT") and all(b["text"] in captions for b in BLOCKS)
    archive = zipfile.ZipFile(io.BytesIO(fetched(doc["bundle"]["url"])))
    assert archive.read("video/lesson.mp4") == mp4 and archive.read("video/lesson.vtt").decode() == captions

    # and on the board, the video plays with its captions
    browser = chromium
    browser.sign_in(server, tokens["admin"])
    browser.open(f"{server}/contents/{created['content_id']}/versions/1")
    browser.wait_for("const v = document.querySelector('video[data-lesson-video]');"
                     "return v && v.readyState >= 1", timeout=20, message="the video's metadata loaded")
    browser.script("const v = document.querySelector('video[data-lesson-video]');"
                   "v.textTracks[0].mode = 'showing'; v.muted = true; v.play();")
    browser.wait_for("const v = document.querySelector('video[data-lesson-video]');"
                     "return v.currentTime > 0.5 && !v.error", timeout=20, message="the video plays")
    cues = browser.wait_for("const t = document.querySelector('video[data-lesson-video]').textTracks[0];"
                            "return t.cues && t.cues.length === 3 && Array.from(t.cues).map(c => c.text)",
                            timeout=10, message="its captions loaded")
    assert cues == [b["text"] for b in BLOCKS]
    browser.screenshot(shots / "lesson-video.png")
