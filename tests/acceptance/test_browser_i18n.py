"""An editor's walk in headless Chromium in Chinese, then in English: the board, the page of a task
whose outcome is unknown, and the consent step of retrying it.

The browser runs in the Asia/Shanghai time zone, which the sign-in form hands to the
session. The language is picked on the sign-in page, then changed with the header
switch. Real pieces as in test_browser: the app over HTTP, RQ worker processes with the
local providers (the demo's `provider_unknown` scenario loses one image's answer, and no
reconciler runs to look it up), PostgreSQL and Redis. Screenshots go to the test's
temporary folder, or to `bin/test --screenshots docs/screenshots`.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
ZONE = "Asia/Shanghai"
# What each language must say, where it matters most.
SAYS = {
    "zh_Hans": {"html": "zh-Hans", "signin": "登录", "unknown": "结果未知",
                "explains": "服务商可能已经完成了这项工作并已收费，但我们无法确认。",
                "consent": "我接受重试可能会对这项工作重复收费", "retried": "你已接受重复计费的风险",
                "tick": "重试前请勾选此框，接受可能再次收费的风险。"},
    "en": {"html": "en", "signin": "Sign in", "unknown": "outcome unknown",
           "explains": ("The provider may have done this work and charged for it, "
                        "but we could not confirm it."),
           "consent": "I accept that retrying may charge for this work twice",
           "retried": "with the duplicate-charge risk accepted by you",
           "tick": "Tick this box to accept the risk of a second charge before retrying."},
}
MEDIA_SETTLED = ("return [...document.querySelectorAll('table.board tbody tr:not(.bundle-row) .chip')]"
                 ".every((c) => ['succeeded', 'unknown'].includes(c.dataset.status)) && "
                 "document.querySelectorAll('.chip[data-status=unknown]').length === 1")


def text_of(browser) -> str:
    return browser.script("return document.body.innerText")


def walk(browser, server: str, shots, lang: str) -> None:
    """Start a demo lesson whose image answer gets lost, then look at it and retry it with consent."""
    says = SAYS[lang]
    assert browser.script("return document.documentElement.lang") == says["html"]
    browser.open(f"{server}/")
    browser.script("document.querySelector('select[name=scenario]').value = 'provider_unknown'")
    browser.click('form[action$="/demo"] button[type="submit"]')
    browser.wait_for("return /^\\/contents\\/\\d+\\/versions\\/1$/.test(location.pathname)", timeout=10,
                     message="the demo lesson's board opens")
    browser.script("window.violations = []; document.addEventListener('securitypolicyviolation', "
                   "(e) => window.violations.push(e.violatedDirective + ' ' + e.blockedURI))")
    browser.wait_for(MEDIA_SETTLED, timeout=90, message="the media settle with one unknown outcome")

    # the board: the unknown chip and its explanation in this language, times in the browser's zone
    board = text_of(browser)
    assert says["unknown"] in board and says["explains"] in board
    hover = browser.script("return document.querySelector('time').title")
    assert hover.endswith(" UTC")
    assert browser.script("return document.querySelector('input[name=tz]').value") == ZONE
    browser.screenshot(shots / f"board-{lang}.png")

    # the task page of the unknown task
    browser.click(".chip[data-status=unknown] .chip-head a")
    browser.wait_for("return location.pathname.startsWith('/tasks/')", timeout=10, message="the task page opens")
    task_path = browser.current_path()
    assert says["explains"] in text_of(browser)
    browser.screenshot(shots / f"task-unknown-{lang}.png")

    # the consent step: without the box ticked the browser does not send the retry, and says why in our words (once
    # the page's script has run: before it, the browser's own words; a loaded machine's run clicked before it)
    browser.wait_for("return document.readyState === 'complete'", timeout=10, message="the task page's script run")
    browser.click("form button.warn")
    assert browser.current_path() == task_path
    box = "document.querySelector('input[name=accept_duplicate_risk]')"
    assert browser.script(f"return {box}.validity.valueMissing && {box}.validationMessage") == says["tick"]
    assert says["consent"] in browser.script("return document.querySelector('label.confirm').innerText")
    browser.open(f"{server}{task_path}")   # a fresh page: the browser's refusal bubble is gone
    browser.click("input[name=accept_duplicate_risk]")
    browser.screenshot(shots / f"consent-{lang}.png")
    browser.click("form button.warn")
    browser.wait_for("return document.querySelector('.flash.ok') !== null", timeout=10, message="the retry is taken")
    assert says["retried"] in browser.script("return document.querySelector('.flash.ok').innerText")
    assert browser.script("return window.violations === undefined || window.violations.length === 0")


def test_an_editor_walks_the_board_an_unknown_task_and_the_consent_step_in_chinese_and_english(
        chromium, server, workers, tokens, shots):  # noqa: F811 - fixtures
    browser = chromium
    browser._call("POST", "/goog/cdp/execute", {"cmd": "Emulation.setTimezoneOverride",
                                                "params": {"timezoneId": ZONE}})
    # the sign-in page, switched to Chinese with its own link
    browser.open(f"{server}/signin")
    browser.click('header a[lang="zh-Hans"]')
    browser.wait_for(f"return document.querySelector('h1').innerText === '{SAYS['zh_Hans']['signin']}'",
                     timeout=10, message="the sign-in page in Chinese")
    browser.type('input[name="api_key"]', tokens["admin"])
    browser.click('form button[type="submit"]')
    browser.wait_for("return location.pathname === '/'", timeout=10, message="signed in")
    walk(browser, server, shots, "zh_Hans")

    # the header switch: choosing English sends the form by itself
    browser.script("const s = document.querySelector('select[name=lang]'); s.value = 'en';"
                   "s.dispatchEvent(new Event('change'))")
    browser.wait_for("return document.documentElement.lang === 'en'", timeout=10, message="the page in English")
    walk(browser, server, shots, "en")
