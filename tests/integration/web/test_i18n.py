"""The UI in Chinese and English: complete catalogs, no untranslated template text, the language
and time zone an editor gets, and English error messages for programs.

The catalog tests need no servers; the page tests run the app against this test's
PostgreSQL, as the other page tests do.
"""

from __future__ import annotations

import re
from datetime import datetime
from html.parser import HTMLParser
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.pofile import read_po

from testkit.pages import csrf_of, page, post, sign_in
from web import i18n, words

WEB = Path(__file__).resolve().parents[3] / "web"
LOCALES = tuple(i18n.LANGUAGES)
KEYWORDS = {"_": None, "gettext": None, "ngettext": (1, 2), "pgettext": ((1, "c"), 2), "_l": None,
            "lazy_gettext": None, "lazy_pgettext": ((1, "c"), 2)}
METHODS = [("**.py", "python"), ("**/templates/**.html", "jinja2")]
# Attributes a reader sees or hears (title on hover, alt and aria-label read aloud, placeholders, confirmations).
SEEN_ATTRIBUTES = {"title", "alt", "aria-label", "placeholder", "data-confirm", "label"}
# Text inside these is code or data, not words.
VERBATIM = {"code", "pre", "script", "style"}
JINJA = re.compile(r"\{\{.*?\}\}|\{%.*?%\}|\{#.*?#\}", re.S)


def strings_in_code() -> set[tuple[str | None, str]]:
    """(context, msgid) of every translatable string in web/, as `pybabel extract -F web/babel.cfg` finds them."""
    found = set()
    for _file, _line, message, _comments, context in extract_from_dir(str(WEB), METHODS, keywords=KEYWORDS):
        msgid = message[0] if isinstance(message, tuple) else message
        found.add((context, msgid))
    return found


def catalog(locale: str):
    with (WEB / "translations" / locale / "LC_MESSAGES" / "messages.po").open("rb") as source:
        return read_po(source, locale=locale)


class Literals(HTMLParser):
    """Words written straight into a template (not through `_()`): text and seen attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[str] = []
        self.open: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag not in ("input", "img", "meta", "link", "br", "option", "source"):
            self.open.append(tag)
        for name, value in attrs:
            if name in SEEN_ATTRIBUTES and has_words(value or ""):
                self.found.append(f'{tag} {name}="{value}"')

    def handle_endtag(self, tag):
        if tag in self.open:
            while self.open and self.open.pop() != tag:
                pass

    def handle_data(self, data):
        if not VERBATIM.intersection(self.open) and has_words(data):
            self.found.append(data.replace("\x00", " ").strip())


def has_words(text: str) -> bool:
    return any(ch.isalpha() for ch in text.replace("\x00", ""))


def literals_in(source: str) -> list[str]:
    parser = Literals()
    parser.feed(JINJA.sub("\x00", source))
    parser.close()
    return parser.found


def test_a_template_word_outside_gettext_is_caught():
    # given: template text written in English, in text and in an attribute a reader hears
    source = '<p>{{ _("fine") }}</p><p>Approve {{ v }}</p><img alt="Illustration" src="{{ u }}"><code>bin/keys</code>'
    # then: both are found, the translated call and the verbatim code are not
    assert literals_in(source) == ["Approve", 'img alt="Illustration"']


@pytest.mark.parametrize("template", sorted(p.name for p in (WEB / "templates").glob("*.html")))
def test_no_template_holds_an_untranslated_word(template):
    assert literals_in((WEB / "templates" / template).read_text(encoding="utf-8")) == []


@pytest.mark.parametrize("locale", LOCALES)
def test_each_catalog_translates_every_string_of_the_ui(locale):
    wanted = strings_in_code()
    assert len(wanted) > 200   # the extraction found the templates and the Python words
    # a plural entry (ngettext) is known by its singular, and translated when every form is
    translated = {(m.context, m.id[0] if isinstance(m.id, tuple) else m.id): m for m in catalog(locale) if m.id}
    missing = sorted(str(key) for key in wanted - set(translated))
    empty = sorted(str(key) for key in wanted & set(translated)
                   if not all(translated[key].string if isinstance(translated[key].string, tuple)
                              else [translated[key].string]))
    fuzzy = sorted(str(key) for key in wanted & set(translated) if translated[key].fuzzy)
    assert (missing, empty, fuzzy) == ([], [], [])


@pytest.mark.parametrize("locale", LOCALES)
def test_each_translation_keeps_the_placeholders_of_its_original(locale):
    problems = [(m.id, [str(e) for e in errors]) for m, errors in catalog(locale).check() if errors]
    placeholders = re.compile(r"%\((\w+)\)s")
    def forms(text) -> list[str]:
        return list(text) if isinstance(text, tuple) else [text]
    differing = [m.id for m in catalog(locale) if m.id and m.string
                 and any(sorted(placeholders.findall(forms(m.id)[-1])) != sorted(placeholders.findall(form))
                         for form in forms(m.string))]
    assert (problems, differing) == ([], [])


def test_catalogs_are_compiled_from_the_po_files_and_only_rewritten_when_they_differ(tmp_path):
    # given: a copy of the catalogs, one of them compiled from an older text
    folder = tmp_path / "translations"
    for po in (WEB / "translations").glob("*/LC_MESSAGES/messages.po"):
        (folder / po.relative_to(WEB / "translations")).parent.mkdir(parents=True)
        (folder / po.relative_to(WEB / "translations")).write_bytes(po.read_bytes())
    assert sorted(p.parts[-3] for p in i18n.compile_catalogs(folder)) == sorted(LOCALES)
    zh = folder / "zh_Hans" / "LC_MESSAGES" / "messages.po"
    zh.write_text(zh.read_text(encoding="utf-8").replace('msgstr "退出登录"', 'msgstr "登出"'), encoding="utf-8")
    # when: the app would start again
    rewritten = i18n.compile_catalogs(folder)
    # then: only the changed one is written, and it holds the new words
    assert rewritten == [zh.with_suffix(".mo")]
    from babel.support import Translations
    with zh.with_suffix(".mo").open("rb") as mo:
        assert Translations(mo).gettext("Sign out") == "登出"
    assert i18n.compile_catalogs(folder) == []
    # and a compiled catalog changed or removed behind this process's back is written again, though its .po is not
    zh.with_suffix(".mo").write_bytes(b"not a catalog")
    en = folder / "en" / "LC_MESSAGES" / "messages.mo"
    en.unlink()
    assert sorted(i18n.compile_catalogs(folder)) == sorted([en, zh.with_suffix(".mo")])
    with zh.with_suffix(".mo").open("rb") as mo:
        assert Translations(mo).gettext("Sign out") == "登出"


def test_the_app_starts_with_compiled_catalogs(app):
    compiled = sorted(p.relative_to(WEB).as_posix() for p in (WEB / "translations").glob("*/LC_MESSAGES/*.mo"))
    assert compiled == [f"translations/{locale}/LC_MESSAGES/messages.mo" for locale in sorted(LOCALES)]


def test_every_error_code_the_ui_can_meet_has_its_own_words():
    root = WEB.parent
    codes = set()
    for path in [*root.glob("pipeline/*.py"), *root.glob("web/*.py")]:
        text = path.read_text(encoding="utf-8")
        codes |= set(re.findall(r'\bcode="([a-z_]+)"', text))
        codes |= set(re.findall(r'Problem\(\d+, "([a-z_]+)"', text))
        codes |= set(re.findall(r'answer\((?:\d+|e\.status), "([a-z_]+)"', text))
    # the HTTP errors a page answers with, named as web.errors names them
    codes |= {"bad_request", "forbidden", "not_found", "method_not_allowed", "request_entity_too_large"}
    assert {"stale_base_version", "duplicate_risk", "over_capacity", "invalid_input", "forbidden"} <= codes
    assert sorted(codes - set(words.CODE_WORDS)) == []


# --- pages ---------------------------------------------------------------------------------

def test_the_sign_in_page_follows_the_browser_language(app):
    client = app.test_client()
    chinese = page_with(client, "/signin", "zh-CN,zh;q=0.9,en;q=0.5")
    assert '<html lang="zh-Hans">' in chinese and "<h1>登录</h1>" in chinese and "Sign in" not in chinese
    english = page_with(client, "/signin", "en-GB,en;q=0.8")
    assert '<html lang="en">' in english and "<h1>Sign in</h1>" in english
    # a language nobody here reads falls back to English; the page's own links pick one
    assert "<h1>Sign in</h1>" in page_with(client, "/signin", "fr-FR")
    assert "<h1>登录</h1>" in page_with(client, "/signin?lang=zh_Hans", "en")


def page_with(client, url: str, accept_language: str, status: int = 200) -> str:
    response = client.get(url, headers={"Accept-Language": accept_language})
    assert response.status_code == status, (url, response.status_code)
    return response.get_data(as_text=True)


def test_the_language_switch_is_kept_in_the_session_over_the_browser_language(app, tokens):
    client = app.test_client()
    csrf = sign_in(client, tokens["admin"])
    assert "<h1>Contents</h1>" in page_with(client, "/", "en")
    response = client.post("/preferences", data={"csrf_token": csrf, "lang": "zh_Hans", "next": "/spend"},
                           headers={"Accept-Language": "en"})
    assert response.status_code == 303 and response.headers["Location"] == "/spend"
    assert "<h1>内容</h1>" in page_with(client, "/", "en-US")
    # another browser with a copy of nothing: its own language
    other = app.test_client()
    sign_in(other, tokens["editor"])
    assert "<h1>Contents</h1>" in page_with(other, "/", "en-US")


def test_a_bad_language_or_time_zone_is_refused_and_changes_nothing(app, tokens):
    client = app.test_client()
    csrf = sign_in(client, tokens["admin"])
    client.post("/preferences", data={"csrf_token": csrf, "lang": "zh_Hans", "tz": "Asia/Shanghai"})
    for bad in ({"lang": "klingon"}, {"tz": "Mars/Olympus_Mons"}, {"tz": "../../etc/passwd"},
                {"lang": "en", "tz": "Nowhere/City"}):
        response = client.post("/preferences", data={"csrf_token": csrf, **bad})
        assert response.status_code == 422, bad
    html = page_with(client, "/", "en")
    assert "<h1>内容</h1>" in html and 'value="Asia/Shanghai"' in html


def test_times_show_in_the_editors_time_zone_with_utc_on_hover(app, tokens, api, work):
    created = api.create(1)
    work.until_idle()
    client = app.test_client()
    signin = page(client, "/signin")
    response = client.post("/signin", data={"api_key": tokens["admin"], "csrf_token": csrf_of(signin),
                                            "tz": "Asia/Shanghai"})
    assert response.status_code == 303
    html = page_with(client, created["board_url"], "zh-CN")
    times = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>', html)
    assert times
    for iso, title, shown in times:
        at = datetime.fromisoformat(iso)
        assert title == at.strftime("%Y-%m-%d %H:%M:%S UTC")
        assert at.astimezone(ZoneInfo("Asia/Shanghai")).strftime("%H:%M:%S") in shown
    # the same session in English, with the zone switched in the header: 12-hour clock of New York
    client.post("/preferences", data={"csrf_token": csrf_of(html), "lang": "en", "tz": "America/New_York"})
    iso, _title, shown = re.findall(r'<time datetime="([^"]+)" title="([^"]+)">([^<]+)</time>',
                                    page(client, created["board_url"]))[0]
    local = datetime.fromisoformat(iso).astimezone(ZoneInfo("America/New_York"))
    assert local.strftime("%-I:%M:%S") in shown and ("AM" in shown or "PM" in shown)


def test_numbers_and_costs_are_formatted_for_the_locale(app):
    from web.present import money, number, seconds
    with app.test_request_context("/", headers={"Accept-Language": "zh-CN"}):
        assert (money(1234.5), number(12345), seconds(2.25)) == ("1,234.5000", "12,345", "2.2 秒")
    with app.test_request_context("/", headers={"Accept-Language": "en"}):
        assert (money(1234.5), number(12345), seconds(2.25)) == ("1,234.5000", "12,345", "2.2 s")


def test_api_error_messages_stay_english_whatever_the_browser_asks(api):
    response = api.get("/api/contents/999999", headers={"Accept-Language": "zh-CN"})
    assert response.status_code == 404
    assert response.json["error"]["code"] == "not_found"
    assert re.fullmatch(r"[ -~]+", response.json["error"]["message"])   # plain English ASCII


def test_an_error_page_says_what_its_code_means_in_the_editors_language(app, tokens):
    client = app.test_client()
    csrf = sign_in(client, tokens["admin"])
    client.post("/preferences", data={"csrf_token": csrf, "lang": "zh_Hans"})
    html = page_with(client, "/contents/999999", "en", status=404)
    assert 'data-code="not_found"' in html and "没有这个页面或条目" in html and "返回内容列表" in html


def test_a_refused_retry_is_explained_in_chinese(app, tokens, api, work):
    from pipeline.core.errors import Ambiguous
    created = api.create(1)
    image = api.get(created["status_url"]).json["tasks"][0]
    work.executor.script[image["id"]] = [Ambiguous("lost")]
    work.until_idle()
    client = app.test_client()
    csrf = sign_in(client, tokens["admin"])
    client.post("/preferences", data={"csrf_token": csrf, "lang": "zh_Hans"})
    task_page = page(client, f"/tasks/{image['id']}")
    assert "结果未知。" in task_page and "我接受重试可能会对这项工作重复收费" in task_page
    post(client, csrf, f"/tasks/{image['id']}/retry", back="task")   # without the consent box
    html = page(client, f"/tasks/{image['id']}")
    assert "未重试：结果未知：重试可能重复收费，因此需要你明确同意。" in html


def test_a_compiled_catalog_the_app_cannot_write_stops_it_with_the_fix(tmp_path):
    from pipeline.core.errors import ConfigError
    # given: a catalog whose compiled file cannot be put in place (a folder holds its name; even root cannot)
    folder = tmp_path / "translations" / "en" / "LC_MESSAGES"
    folder.mkdir(parents=True)
    (folder / "messages.po").write_bytes((WEB / "translations/en/LC_MESSAGES/messages.po").read_bytes())
    (folder / "messages.mo").mkdir()
    # then: starting says what is wrong and what to do, and leaves no temporary file behind
    with pytest.raises(ConfigError, match="must be writable"):
        i18n.compile_catalogs(tmp_path / "translations")
    assert sorted(p.name for p in folder.iterdir()) == ["messages.mo", "messages.po"]


def test_a_compiled_catalog_does_not_depend_on_the_minute_it_was_compiled(tmp_path):
    # given: a catalog whose file names no creation date, as ours do
    folder = tmp_path / "translations"
    po = WEB / "translations" / "zh_Hans" / "LC_MESSAGES" / "messages.po"
    assert b"POT-Creation-Date:" not in po.read_bytes()
    copy = folder / "zh_Hans" / "LC_MESSAGES" / "messages.po"
    copy.parent.mkdir(parents=True)
    copy.write_bytes(po.read_bytes())
    # when: it is compiled
    i18n.compile_catalogs(folder)
    # then: the compiled header carries the fixed date, not the clock's, so a compile a minute later is the same
    from babel.messages.mofile import read_mo
    with copy.with_suffix(".mo").open("rb") as mo:
        assert read_mo(mo).creation_date == datetime(1970, 1, 1, tzinfo=ZoneInfo("UTC"))
