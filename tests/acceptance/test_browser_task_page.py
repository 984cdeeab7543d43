"""The task page follows its task in headless Chromium, as the board does: after a consented retry it turns from
"ready" to "succeeded" without a reload, the consent form and the old error gone.

The app is served over HTTP from this process; the work runs in this process too (RQ's SimpleWorker with the
scripted executor), when the test says, so the page is seen before and after. Skips where Chromium is missing.
"""

from __future__ import annotations

import pytest

from pipeline.core.errors import Ambiguous

pytestmark = pytest.mark.slow
# the state chip at the top of the page, and the error under it
STATUS = "return [...document.querySelector('.chip-inline').classList].find((c) => c.startsWith('s-')).slice(2)"
ERROR = "document.querySelector('main p.err, main .unknown-help details.raw')"


def test_after_a_consented_retry_the_task_page_turns_succeeded_without_a_reload(chromium, server, api, work, tokens):
    # given: an image whose answer was lost: its outcome is unknown
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("connection lost after the request was sent")]
    work.until_idle()
    assert api.get(f"/api/tasks/{image['id']}").json["status"] == "unknown"
    browser = chromium
    browser.sign_in(server, tokens["editor"])
    browser.open(f"{server}/tasks/{image['id']}")
    assert browser.script(STATUS) == "unknown"
    assert browser.script(f"return {ERROR} !== null")
    # when: the editor accepts the risk and retries; no worker runs yet, so the page shows it waiting
    browser.click("input[name=accept_duplicate_risk]")
    browser.click("form button.warn")
    browser.wait_for("return document.querySelector('.flash.ok') !== null", timeout=10, message="the retry is taken")
    assert browser.script(STATUS) == "ready"
    assert browser.script("return document.querySelector('input[name=accept_duplicate_risk]') === null")
    assert browser.script(f"return {ERROR} === null")   # the old error is history
    browser.script("window.notReloaded = true")
    # and then the task runs
    work.until_idle()
    # then: the same page, never reloaded, says it succeeded, with its asset and the consent in its timeline
    browser.wait_for(f"return ({STATUS[7:]}) === 'succeeded' && window.notReloaded === true", timeout=15,
                     message="the task page shows the success without a reload")
    assert browser.script("return document.querySelector('main a[href^=\"/media/\"]') !== null")
    assert "duplicate risk accepted" in browser.script("return document.querySelector('main').innerText")
    # and it stops asking once the task is settled
    assert browser.script("return document.querySelector('.task-state').dataset.live") == "false"
