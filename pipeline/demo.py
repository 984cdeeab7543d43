"""Demo jobs: built-in lessons, and faults armed in the local providers to show recovery.

`POST /api/jobs {"theme", "scenario"?}` (demo mode only) saves a lesson from a
template and arms the scenario's fault in the local image provider. Faults live
in the providers' journal directory, so the worker process that makes the call
meets it. A job with a scenario tags its image prompts with a short run mark, so
its images are new work, and arms the fault for that mark only: it strikes the
first image call of this lesson, never another lesson's. A job without a scenario
reuses earlier identical media.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

import psycopg

from pipeline import versions
from pipeline.core.content import Draft, parse_draft
from pipeline.core.errors import Conflict, InvalidInput
from pipeline.core.principal import Principal
from pipeline.executor import build_providers
from pipeline.settings import Settings

# scenario -> the local provider fault that plays it (providers/journal.py FAULTS)
SCENARIOS = {
    "media_timeout": "fail_before_send",      # first image call fails before reaching the provider; retried
    # work done, answer lost, and the provider's lookup cannot tell: unknown until an editor decides (retry with
    # consent, or resolve), whatever the reconciler asks; `worker_crash` shows a lookup recovering a lost result
    "provider_unknown": "accept_then_lose_untraced",
    "worker_crash": "crash_mid_call",         # the worker dies mid-call: lease expiry, then the reconciler
    "permanent_error": "permanent_error",     # refused for good: failed, waiting for an editor
    "rate_limited": "rate_limited",           # busy: rescheduled without spending an attempt
}


@dataclass(frozen=True)
class Template:
    theme_zh: str
    theme_en: str
    zh: tuple[str, ...]
    en: tuple[str, ...]


TEMPLATES = (
    Template("校园生活", "campus life",
             ("早上七点，我背着书包去学校。", "第一节课是中文课，老师教我们写汉字。",
              "中午我和同学们在食堂一起吃饭。", "下课以后，我们去操场打篮球。"),
             ("At seven in the morning I walk to school with my backpack.",
              "The first class is Chinese; the teacher shows us how to write characters.",
              "At noon my classmates and I eat lunch together in the canteen.",
              "After class we play basketball on the sports field.")),
    Template("家庭", "family",
             ("我家有四口人：爸爸、妈妈、妹妹和我。", "爸爸是医生，妈妈是老师。",
              "周末我们一起去公园散步。", "晚上我们一起做饭、聊天。"),
             ("There are four people in my family: dad, mum, my little sister and me.",
              "My dad is a doctor and my mum is a teacher.",
              "At the weekend we go for a walk in the park together.",
              "In the evening we cook dinner and talk together.")),
    Template("旅行", "travel",
             ("暑假我们坐火车去北京旅行。", "我们参观了长城和故宫。",
              "北京烤鸭非常好吃。", "我给朋友们买了很多礼物。"),
             ("In the summer holidays we take the train to Beijing.",
              "We visit the Great Wall and the Forbidden City.",
              "Peking duck is delicious.",
              "I buy many presents for my friends.")),
)


def themes() -> list[str]:
    return [name for t in TEMPLATES for name in (t.theme_zh, t.theme_en)]


def _find(theme: str) -> tuple[Template, str]:
    wanted = theme.strip().casefold()
    for template in TEMPLATES:
        if wanted == template.theme_zh:
            return template, "zh-CN"
        if wanted == template.theme_en.casefold():
            return template, "en-US"
    raise InvalidInput(f"theme {theme!r} has no built-in lesson; choose one of: {', '.join(themes())}",
                       field="theme")


def lesson(theme: str, *, locale: str | None = None, mark: str | None = None) -> Draft:
    """The built-in lesson for a theme (Chinese or English name), optionally in the other language."""
    template, found_locale = _find(theme)
    locale = locale or found_locale
    if locale not in ("zh-CN", "en-US"):
        raise InvalidInput(f"locale {locale!r} has no built-in lesson; use zh-CN or en-US", field="locale")
    chinese = locale == "zh-CN"
    texts = template.zh if chinese else template.en
    title = template.theme_zh if chinese else template.theme_en.capitalize()
    blocks = [{"key": f"s{i}", "text": text, **({"image_prompt": f"{text} ({mark})"} if mark else {})}
              for i, text in enumerate(texts, 1)]
    return parse_draft({"title": title, "locale": locale, "theme": template.theme_zh, "blocks": blocks})


def parse_job(body: object) -> tuple[str, str | None, str | None]:
    """(theme, scenario, locale) from a job request body; InvalidInput naming the field."""
    if not isinstance(body, dict):
        raise InvalidInput("the body must be a JSON object such as {\"theme\": \"校园生活\"}", field="body")
    theme, scenario, locale = body.get("theme"), body.get("scenario"), body.get("locale")
    if not isinstance(theme, str) or not theme.strip():
        raise InvalidInput(f"theme is required; choose one of: {', '.join(themes())}", field="theme")
    if scenario is not None and (not isinstance(scenario, str) or scenario not in SCENARIOS):
        raise InvalidInput(f"scenario {scenario!r} is unknown; choose one of: {', '.join(SCENARIOS)}",
                           field="scenario")
    if locale is not None and not isinstance(locale, str):
        raise InvalidInput("locale must be zh-CN or en-US", field="locale")
    return theme, scenario, locale


def run_mark() -> str:
    return f"demo {secrets.token_hex(4)}"


def arm(cfg: Settings, scenario: str, mark: str) -> None:
    """Arm the scenario's fault for the next image call whose prompt carries `mark` (this job's lesson), in
    any process sharing MEDIA_DIR."""
    if cfg.providers["image"].backend != "local":
        raise Conflict(f"scenario {scenario!r} needs the local image provider (IMAGE_PROVIDER=local)",
                       code="scenario_unavailable")
    build_providers(cfg)["image"].arm(SCENARIOS[scenario], scope=mark)


def disarm(cfg: Settings, mark: str) -> int:
    """Drop this job's armed image fault (its save was refused, so no fault lingers); others stay armed."""
    if cfg.providers["image"].backend != "local":
        return 0
    return build_providers(cfg)["image"].disarm_all(scope=mark)


def start_job(conn: psycopg.Connection, cfg: Settings, theme: str, scenario: str | None, *,
              by: Principal, locale: str | None = None) -> versions.Saved:
    """`by` saves the theme's lesson with the scenario's fault armed; nothing stays armed if the save is refused."""
    mark = run_mark() if scenario else None
    draft = lesson(theme, locale=locale, mark=mark)
    if scenario:
        # armed before the save commits, so no worker can make this lesson's first image call unarmed
        arm(cfg, scenario, mark)
    try:
        return versions.save(conn, draft, cfg, by=by)
    except Exception:
        if scenario:
            disarm(cfg, mark)
        raise
