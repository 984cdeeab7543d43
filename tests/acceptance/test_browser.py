"""A user's path through the UI in headless Chromium: sign in, create a lesson, watch it complete,
hear that the narration has a duration, approve, download the delivery.

Real pieces throughout: the app served over HTTP, one RQ worker process per queue with
the local image and speech providers, PostgreSQL and Redis. Skips where Chromium or its
driver is missing. Screenshots of the board and the delivery page go to the test's temporary folder, or to
`bin/test --screenshots docs/screenshots` to refresh the ones in the docs.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import requests

from testkit.system import rq_worker_argv
from testkit.webapp import TEST_ENV

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def test_an_editor_signs_in_creates_a_lesson_watches_it_complete_approves_and_downloads(
        chromium, server, workers, tokens, shots):
    browser = chromium
    browser.sign_in(server, tokens["admin"])

    # create a two-block lesson; the second block is added with the editor's button
    browser.open(f"{server}/contents/new")
    browser.type('input[name="title"]', "校园生活")
    browser.type('[data-block]:nth-child(1) textarea', "早上七点，我背着书包去学校。")
    browser.click("[data-add-block]")
    browser.type('[data-block]:nth-child(2) textarea', "下课以后，我们去操场打篮球。")
    browser.click("button.primary")
    browser.wait_for("return /^\\/contents\\/\\d+\\/versions\\/1$/.test(location.pathname)", timeout=10,
                     message="the board of version 1 opens")

    # the page runs under its Content-Security-Policy: from here on, anything it is refused is recorded
    browser.script("window.violations = []; document.addEventListener('securitypolicyviolation', "
                   "(e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI))")

    # watch it complete: the board refreshes itself every 2 s while work runs
    browser.wait_for("return document.querySelector('.board-state')?.dataset.running === 'false' && "
                     "document.querySelectorAll('.chip[data-status=succeeded]').length === 5",
                     timeout=90, message="every task succeeds")
    # the stylesheet applied, the script refreshed the board, the policy refused nothing of ours...
    assert browser.script("return window.violations") == []
    assert browser.script("return getComputedStyle(document.querySelector('header.top')).display") == "flex"
    assert browser.script("return document.querySelectorAll('.progress rect.seg').length") >= 1
    # ...and it is enforced: an inline script is refused
    assert browser.script("const s = document.createElement('script'); s.textContent = 'window.inlineRan = 1';"
                          "document.head.appendChild(s); return window.inlineRan === undefined")
    assert browser.wait_for("return window.violations.length", timeout=5, message="the refusal is reported") == 1
    duration = browser.wait_for(
        "const a = document.querySelector('audio'); a.load && a.readyState === 0 && a.load();"
        "return a.readyState >= 1 && isFinite(a.duration) && a.duration", timeout=20,
        message="the narration has a duration")
    assert duration > 0.5
    assert browser.script("return document.querySelector('.thumb img').naturalWidth") > 0
    browser.screenshot(shots / "board.png")

    # approve, then the delivery page offers the bundle
    browser.click("section.approval button.primary")
    browser.wait_for("return document.body.innerText.includes('Approved by')", timeout=10, message="approved")
    browser.click('a[href$="/delivery"]')
    browser.wait_for("return document.querySelector('[data-bundle]') !== null", timeout=10,
                     message="the delivery page offers the bundle")
    browser.screenshot(shots / "delivery.png")
    bundle = requests.get(browser.script("return document.querySelector('[data-bundle]').href"), timeout=10)
    assert bundle.status_code == 200 and bundle.headers["Content-Type"] == "application/zip"
    names = zipfile.ZipFile(io.BytesIO(bundle.content)).namelist()
    assert "manifest.json" in names and len([n for n in names if n.startswith(("image/", "audio/"))]) == 4


def api_call(server: str, key: str, method: str, path: str, **kw) -> requests.Response:
    return requests.request(method, f"{server}{path}", headers={"X-API-Key": key}, timeout=30, **kw)


def wait_complete(browser, timeout: float = 90) -> None:
    browser.wait_for("return document.querySelector('.board-state')?.dataset.running === 'false' && "
                     "document.querySelectorAll('.chip[data-status=succeeded]').length === "
                     "document.querySelectorAll('.chip').length", timeout=timeout, message="every task succeeds")


def test_a_reviewer_compares_regenerates_rejects_withdraws_and_works_through_the_attention_page(
        chromium, server, workers, tokens, shots):
    browser, key = chromium, tokens["admin"]
    browser.sign_in(server, key)
    # given: a lesson made, then a second version with one block changed
    lesson = {"title": "校园生活", "locale": "zh-CN", "blocks": [
        {"key": "b1", "text": "早上七点，我背着书包去学校。"}, {"key": "b2", "text": "下课以后，我们去操场打篮球。"}]}
    created = api_call(server, key, "POST", "/api/contents", json=lesson).json()
    browser.open(f"{server}{created['board_url']}")
    wait_complete(browser)
    lesson["blocks"][1]["text"] = "下课以后，我们去图书馆看书。"
    second = api_call(server, key, "PUT", created["content_url"], json={**lesson, "base_version": 1}).json()
    browser.open(f"{server}{second['board_url']}")
    wait_complete(browser)

    # compare: the board's button opens v1 -> v2; b2 changed, b1's media reused
    browser.click("a[data-compare]")
    browser.wait_for("return document.querySelector('[data-block=b2][data-change=changed] ins') !== null",
                     timeout=10, message="the compare page marks the changed text")
    assert browser.script("return document.querySelectorAll('[data-block=b1] [data-media-change=reused]').length") == 2
    browser.screenshot(shots / "compare.png")

    # regenerate b1's picture: a reason and a tick, then version 3 is made with one new call
    browser.open(f"{server}{second['board_url']}")
    browser.click(".chip[data-status=succeeded] a[data-regenerate]")
    browser.wait_for("return document.querySelector('input[name=accept_new_charge]') !== null", timeout=10,
                     message="the confirmation page opens")
    browser.type('input[name="reason"]', "画面太暗，换一张")
    browser.click('input[name="accept_new_charge"]')
    browser.screenshot(shots / "regenerate.png")
    browser.click("button.warn")
    browser.wait_for("return /\\/versions\\/3$/.test(location.pathname)", timeout=10, message="version 3 opens")
    wait_complete(browser)
    assert browser.script("return document.querySelector('[data-regenerated]').innerText").find("画面太暗") >= 0
    images = [next(t["sha256"] for t in api_call(server, key, "GET", f"{created['content_url']}/versions/{v}").json()
                   ["tasks"] if (t["kind"], t["block"]) == ("image", "b1")) for v in (2, 3)]
    assert images[0] != images[1]   # a new picture, and the old one still served
    assert api_call(server, key, "GET", f"/media/{images[0]}").status_code == 200

    # reject version 3 with a note
    browser.script("document.querySelector('select[name=decision]').value = 'rejected'")
    browser.type('form[data-review-form] input[name="note"]', "The second picture does not match the text.")
    browser.click("form[data-review-form] button")
    browser.wait_for("return document.querySelector('[data-review=rejected]') !== null", timeout=10,
                     message="the rejection is on the board")
    browser.screenshot(shots / "review-decision.png")

    # approve it after all, then withdraw the approval: the delivery says why
    browser.click("section.approval button.primary")
    browser.wait_for("return document.body.innerText.includes('Approved by')", timeout=10, message="approved")
    browser.type('form[data-review-form] input[name="note"]', "The licence of the pictures has expired.")
    browser.click("form[data-review-form] button")
    browser.wait_for("return document.querySelector('[data-review=approval_withdrawn]') !== null", timeout=10,
                     message="the withdrawal is on the board")
    browser.open(f"{server}/contents/{created['content_id']}/delivery")
    assert "licence of the pictures" in browser.script("return document.querySelector('[data-withdrawn]').innerText")
    browser.screenshot(shots / "delivery-withdrawn.png")
    answer = api_call(server, key, "GET", f"/api/contents/{created['content_id']}/delivery")
    assert answer.status_code == 409 and "approval_withdrawn" in answer.json()["error"]["details"]["reasons"]

    # the attention page: a demo lesson whose first image is refused for good shows up; retry it from the list
    job = api_call(server, key, "POST", "/api/jobs", json={"theme": "家庭", "scenario": "permanent_error"}).json()
    browser.open(f"{server}/attention")
    browser.wait_for("if (!document.querySelector('[data-problem=failed] input[type=checkbox]')) location.reload();"
                     "return document.querySelector('tr[data-problem=failed] input[type=checkbox]') !== null",
                     timeout=60, message="the failed task is listed")
    browser.screenshot(shots / "attention.png")
    browser.click("tr[data-problem=failed] input[type=checkbox]")
    browser.click("button[value=retry]")
    browser.wait_for("return document.querySelector('.flash.ok') !== null", timeout=10, message="retried")
    browser.open(f"{server}{job['board_url']}")
    wait_complete(browser)


def test_an_operator_reads_why_a_task_is_stuck_behind_a_dependency_and_behind_a_killed_worker(
        chromium, server, tokens, conn, database_url, redis_url, media_dir, tmp_path):
    from pipeline import settings
    from pipeline.executor import build_providers
    from providers.journal import CRASH_EXIT_CODE
    from testkit.helpers import lesson, wait_until

    env = {"DATABASE_URL": database_url, "REDIS_URL": redis_url, "MEDIA_DIR": str(media_dir), **TEST_ENV}
    build_providers(settings.load(env))["image"].arm("crash_mid_call")   # the image worker dies mid-call
    saved = api_call(server, tokens["admin"], "POST", "/api/contents", json=lesson(1, prefix="stuck"))
    assert saved.status_code == 202, saved.text
    rows = conn.execute("SELECT id, kind::text AS kind FROM tasks WHERE content_id = %s ORDER BY id",
                        (saved.json()["content_id"],)).fetchall()
    image, bundle = next(r["id"] for r in rows if r["kind"] == "image"), next(r["id"] for r in rows
                                                                              if r["kind"] == "bundle")
    browser = chromium
    browser.sign_in(server, tokens["admin"])

    # no worker yet: the bundle waits for its image, and says which
    browser.open(f"{server}/tasks/{bundle}")
    said = browser.wait_for("return document.querySelector('[data-diagnosis]')?.innerText", timeout=10,
                            message="the diagnosis")
    assert said.lower().startswith(f"waiting for image task {image} (ready)")
    assert browser.script("return document.querySelector('[data-unmet] a').getAttribute('href')") == f"/tasks/{image}"

    # an image worker claims the image and dies in the middle of the call; nothing recovers it here
    log = (tmp_path / "image-worker.log").open("w")
    worker = subprocess.Popen([sys.executable, *rq_worker_argv("image")], cwd=ROOT, stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    try:
        assert worker.wait(60) == CRASH_EXIT_CODE            # it died in the call, as the fault does
    finally:
        if worker.poll() is None:
            worker.kill()
        log.close()
    # the page, as an operator reloads it: who held the lease, and when recovery takes the task
    def diagnosis_once_the_lease_ran_out():
        browser.open(f"{server}/tasks/{image}")
        text = browser.script("return document.querySelector('[data-diagnosis]')?.innerText || ''")
        return "its lease ran out at" in text and text

    said = wait_until(diagnosis_once_the_lease_ran_out, timeout=20, interval=0.5, message="the lease running out")
    assert said.startswith("running, last heartbeat") and "recovery takes it by" in said
    holder = browser.script("return document.querySelector('[data-lease]').innerText")
    assert f"{socket.gethostname()}:{worker.pid}" in holder
