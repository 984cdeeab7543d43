"""Every page in every state, in Chinese, shows no English words of ours: states, reasons, history lines, errors,
our own 403, 404 and 413 pages. Words that are data stay as they are: ids, codes, e-mail addresses, model and
provider names, units; a provider's or the system's raw detail is allowed only folded away under a translated
summary (`<details class="raw">`). And in English, counts agree with their nouns ("1 content")."""

from __future__ import annotations

import re
from html.parser import HTMLParser

from pipeline.core.errors import Ambiguous, Permanent
from testkit.helpers import lesson
from testkit.pages import page, post, sign_in

# Words that are names, not language: providers, models, formats, units, abbreviations read the same in any language.
ALLOWED = {"UTC", "HTTP", "API", "JSON", "ID", "MiB", "ms", "s", "local", "openai", "card", "espeak", "webp", "wav",
           "zip", "png", "zh", "en", "CN", "US", "Hans", "zh-CN", "v", "sha", "X-API-Key", "gpt", "tts", "mini", "image"}
WORD = re.compile(r"[A-Za-z][A-Za-z'’-]*[A-Za-z]|[A-Za-z]")
# Not words: e-mail addresses, URLs and paths, identifiers with digits or underscores, ALL-CAPS settings names.
# File names and lower-case identifiers with hyphens (worker and provider names) are names too.
NOT_WORDS = re.compile(r"\S+@\S+|https?://\S+|/\S*|\S*[0-9_]\S*|\b[A-Z][A-Z_]+[A-Z]\b|\b\w+\.[a-z]{2,4}\b|"
                       r"\b[a-z]+(?:-[a-z]+)+\b")
SKIPPED = {"script", "style", "code", "pre", "option"}
SEEN = {"title", "alt", "aria-label", "placeholder", "data-confirm", "data-required-message"}


class Shown(HTMLParser):
    """The text a reader sees or hears, but what is code, or raw detail folded under a summary."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.stack: list[tuple[str, bool]] = []   # (tag, hides its content)

    def hidden(self) -> bool:
        return any(hides for _, hides in self.stack)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in ("input", "img", "meta", "link", "br", "source", "hr"):
            raw = tag == "details" and "raw" in (attrs.get("class") or "").split()
            self.stack.append((tag, tag in SKIPPED or raw))
        if not self.hidden() and tag != "time":
            self.parts += [value for name, value in attrs.items() if name in SEEN and value]

    def handle_endtag(self, tag):
        if any(t == tag for t, _ in self.stack):
            while self.stack and self.stack.pop()[0] != tag:
                pass

    def handle_data(self, data):
        summary = bool(self.stack) and self.stack[-1][0] == "summary"
        if not self.hidden() or (summary and sum(h for _, h in self.stack) == 1 and self.stack[-2][0] == "details"):
            self.parts.append(data)


def english_in(html: str) -> list[str]:
    parser = Shown()
    parser.feed(html)
    found = []
    for part in parser.parts:
        for word in WORD.findall(NOT_WORDS.sub(" ", part)):
            if word not in ALLOWED:
                found.append(word)
    return found


def test_the_checker_finds_english_and_lets_names_and_folded_details_be():
    html = ('<p>任务 <b>claimed</b> by admin@example.com</p><code>bin/keys</code><details class="raw"><summary>详情'
            '</summary>TimeoutError: read timed out</details><p title="Retry">IMAGE_MODEL · gpt-image-2 · v3</p>')
    assert english_in(html) == ["claimed", "by", "Retry"]


def _world(api, work, conn) -> dict:
    """One of everything a page can show: failed, unknown (then retried with consent), reused, regenerated,
    approved, replaced, withdrawn, rejected, budget-paused and late tasks, a paused bulk lane."""
    a = api.create(2)
    tasks = api.tasks_of(a)
    work.executor.script[tasks["image:b1"]["id"]] = [Permanent("the prompt is not allowed")]
    work.executor.script[tasks["image:b2"]["id"]] = [Ambiguous("connection lost after the request was sent")]
    work.until_idle()
    b = api.create(1)
    work.until_idle()
    assert api.approve(b, role="admin").status_code == 200
    second = api.put(b["content_url"], role="editor", json={"title": "校园生活", "locale": "zh-CN", "base_version": 1,
                                                            "blocks": [{"key": "b1", "text": "第1段：我们在公园学习。"}]})
    work.until_idle()
    v2 = {"status_url": second.json["status_url"]}
    assert api.approve(v2).status_code == 200
    api.post(v2["status_url"] + "/withdraw", role="reviewer", json={"note": "图片不对"})
    api.post(v2["status_url"] + "/request-changes", role="reviewer", json={"note": "换一张图"})
    assert api.approve(b).status_code == 200
    image = api.tasks_of(v2)["image:b1"]
    regenerated = api.post(f"/api/tasks/{image['id']}/regenerate", role="editor",
                           json={"accept_new_charge": True, "reason": "太暗了"})
    work.until_idle()
    c = api.create(2)
    paused, late = api.tasks_of(c)["tts:b1"], api.tasks_of(c)["image:b2"]
    conn.execute("UPDATE tasks SET status = 'retry', waiting_for = 'budget', last_error = 'busy (BudgetReached: "
                 "paused: daily budget reached)', last_error_code = 'budget' WHERE id = %s", (paused["id"],))
    conn.execute("UPDATE tasks SET deadline_at = now() - interval '1 minute' WHERE id = %s", (late["id"],))
    d = api.post("/api/contents", json=lesson(2, prefix="另一课"), role="editor").json   # failed and unknown, left so
    left = api.tasks_of(d)
    work.executor.script[left["image:b1"]["id"]] = [Permanent("the prompt is not allowed")]
    work.executor.script[left["image:b2"]["id"]] = [Ambiguous("connection lost after the request was sent")]
    work.until_idle()
    api.post("/api/lanes/bulk/pause", role="admin")
    return {"a": a, "b": b, "v2": v2, "v3": regenerated.json, "c": c, "d": d, "unknown": tasks["image:b2"],
            "failed": tasks["image:b1"]}


def test_every_page_in_every_state_speaks_chinese(app, api, work, tokens, conn):
    world = _world(api, work, conn)
    client = app.test_client()
    csrf = sign_in(client, tokens["admin"])
    client.post("/preferences", data={"csrf_token": csrf, "lang": "zh_Hans"})
    # the unknown task retried with consent, the failed one retried: their timelines say so
    post(client, csrf, f"/tasks/{world['unknown']['id']}/retry", accept_duplicate_risk="yes", back="task")
    post(client, csrf, f"/tasks/{world['failed']['id']}/retry", back="task")
    work.until_idle()
    urls = ["/", "/?q=校园", "/contents/new", "/attention", "/attention?problem=unknown", "/spend"]
    for key in ("a", "b", "c", "d"):
        content_id = world[key]["content_id"]
        urls += [f"/contents/{content_id}/edit", f"/contents/{content_id}/delivery", f"/spend?content={content_id}"]
        versions = api.get(world[key]["content_url"]).json["versions"]
        for v in versions:
            urls.append(f"/contents/{content_id}/versions/{v['version']}")
            for t in api.get(v["url"]).json["tasks"]:
                urls += [f"/tasks/{t['id']}", f"/tasks/{t['id']}/live"]
        if len(versions) > 1:
            urls.append(f"/contents/{content_id}/compare")
    urls.append(f"/tasks/{world['v3']['task_id']}/regenerate")
    found = {}
    for url in urls:
        words = english_in(page(client, url))
        if words:
            found[url] = sorted(set(words))
    # a refused action's message: our words, the English detail folded away
    board = f"/contents/{world['d']['content_id']}/versions/1"
    assert post(client, csrf, board + "/approve").status_code == 303
    refused = page(client, board)
    assert 'class="flash error"' in refused
    if english_in(refused):
        found["a refused approval's message"] = sorted(set(english_in(refused)))
    # our own error pages, in the layout with the header: not found, forbidden (a reviewer may not edit), too large
    reviewer = app.test_client()
    reviewer_csrf = sign_in(reviewer, tokens["reviewer"])
    reviewer.post("/preferences", data={"csrf_token": reviewer_csrf, "lang": "zh_Hans"})
    too_large = client.post("/contents/new", data={"csrf_token": csrf, "title": "x" * (2 << 20)})
    assert too_large.status_code == 413
    for url, html in (("/no-such-page", page(client, "/no-such-page", 404)),
                      ("/contents/999/versions/1", page(client, "/contents/999/versions/1", 404)),
                      ("/tasks/999", page(client, "/tasks/999", 404)),
                      ("/contents/new as a reviewer", page(reviewer, "/contents/new", 403)),
                      ("/contents/new, 2 MiB", too_large.get_data(as_text=True))):
        words = english_in(html) + ([] if 'action="/signout"' in html else ["<the header without sign-out>"])
        if words:
            found[url] = sorted(set(words))
    assert found == {}, "\n".join(f"{url}: {' '.join(words)}" for url, words in found.items())


def test_in_english_a_count_of_one_takes_the_singular(app, api, work, tokens):
    created = api.create(1)
    work.until_idle()
    client = app.test_client()
    sign_in(client, tokens["admin"])
    assert "1 content<" in page(client, "/") and "1 contents" not in page(client, "/")
    image = api.tasks_of(created)["image:b1"]
    assert re.search(r"sent to a worker 1 time\b(?!s)", page(client, f"/tasks/{image['id']}"))


def test_chinese_says_block_with_one_word():
    from babel.messages.pofile import read_po
    from web import i18n
    with (i18n.TRANSLATIONS / "zh_Hans" / "LC_MESSAGES" / "messages.po").open("rb") as source:
        catalog = read_po(source, locale="zh_Hans")
    about_blocks = [m for m in catalog if m.id and re.search(r"\bblocks?\b", str(m.id), re.I)]
    assert len(about_blocks) > 5
    used = {word for m in about_blocks for word in ("段落", "区块", "板块", "模块", "内容块") if word in str(m.string)}
    assert used == {"段落"}


def test_an_unknown_outcome_is_explained_once_on_the_board_and_on_its_page(app, api, work, tokens):
    created = api.create(1)
    image = api.tasks_of(created)["image:b1"]
    work.executor.script[image["id"]] = [Ambiguous("connection lost after the request was sent")]
    work.until_idle()
    client = app.test_client()
    sign_in(client, tokens["admin"])
    for url in (created["board_url"], f"/tasks/{image['id']}"):
        html = page(client, url)
        assert html.count("could not confirm") == 1, url
        assert "connection lost after the request was sent" in html   # folded, not gone
