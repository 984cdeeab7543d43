"""Content input: validation and the tasks a version needs. Pure: no I/O.

A content item has a title, a locale, an optional theme and an ordered list of
blocks (`key`, `text`, optional `image_prompt`). Every block gets an illustration
(its image prompt, or its text when it has none) and a narration of its text; the
version's video and its bundle wait for them (the kinds: pipeline/core/kinds/).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from pipeline.core.errors import InvalidInput
from pipeline.core.fingerprint import digest
from pipeline.core import kinds

MAX_BLOCKS = 100
MAX_TEXT = 2000
MAX_PROMPT = 1000
MAX_TITLE = 200
_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
# what PostgreSQL text cannot hold: NUL, and a lone surrogate (legal in a JSON escape, but not UTF-8)
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_LOCALE = re.compile(r"^[a-z]{2,3}(-[A-Za-z0-9]{2,8})*$")
LIMITS = {"blocks": MAX_BLOCKS, "text": MAX_TEXT, "image_prompt": MAX_PROMPT, "title": MAX_TITLE}


@dataclass(frozen=True)
class Block:
    key: str
    text: str
    image_prompt: str | None = None
    # A deliberate new paid call for this block's media, by kind ("image", "tts"): a nonce that joins the
    # input fingerprint, so the reuse rule cannot answer it with the old asset. Set only by a regeneration
    # and carried to later versions while the block's input stays the same (pipeline/regenerate.py).
    regeneration: tuple[tuple[str, str], ...] = ()

    def as_dict(self) -> dict:
        doc = {"key": self.key, "text": self.text, "image_prompt": self.image_prompt}
        if self.regeneration:   # absent otherwise, so digests of ordinary blocks stay as they were
            doc["regeneration"] = dict(self.regeneration)
        return doc

    def nonce(self, kind: str) -> str | None:
        return dict(self.regeneration).get(kind)


@dataclass(frozen=True)
class Draft:
    """A validated save request."""

    title: str
    locale: str
    theme: str | None
    blocks: tuple[Block, ...]

    def as_dict(self) -> dict:
        return {"title": self.title, "locale": self.locale, "theme": self.theme,
                "blocks": [b.as_dict() for b in self.blocks]}

    @property
    def digest(self) -> str:
        return digest(self.as_dict())


def _text(body: Mapping, name: str, limit: int, *, required: bool = True, where: str = "") -> str | None:
    value = body.get(name)
    path = f"{where}{name}"
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{path} is required and must be a string", field=path)
    if UNSTORABLE.search(value):
        raise InvalidInput(f"{path} holds a NUL byte or an unpaired surrogate, which text cannot store",
                           field=path)
    value = value.strip()
    if not value and required:
        raise InvalidInput(f"{path} must not be empty", field=path)
    if len(value) > limit:
        raise InvalidInput(f"{path} is {len(value)} characters; the limit is {limit}", field=path)
    return value or None


def parse_draft(body: Any) -> Draft:
    """Validate a save request body; raise InvalidInput naming the offending field."""
    if not isinstance(body, Mapping):
        raise InvalidInput("the body must be a JSON object", field="body")
    title = _text(body, "title", MAX_TITLE)
    locale = _text(body, "locale", 35)
    if not _LOCALE.match(locale):
        raise InvalidInput(f"locale {locale!r} is not a language tag such as zh-CN or en-US", field="locale")
    theme = _text(body, "theme", 100, required=False)
    raw_blocks = body.get("blocks")
    if not isinstance(raw_blocks, list) or not raw_blocks:
        raise InvalidInput("blocks must be a non-empty list", field="blocks")
    if len(raw_blocks) > MAX_BLOCKS:
        raise InvalidInput(f"{len(raw_blocks)} blocks; the limit is {MAX_BLOCKS}", field="blocks")
    blocks, seen = [], set()
    for i, raw in enumerate(raw_blocks):
        where = f"blocks[{i}]."
        if not isinstance(raw, Mapping):
            raise InvalidInput(f"blocks[{i}] must be an object", field=f"blocks[{i}]")
        key = _text(raw, "key", 64, where=where)
        if not _KEY.match(key):
            raise InvalidInput(f"{where}key {key!r} may hold letters, digits, '-' and '_' (at most 64)",
                               field=f"{where}key")
        if key in seen:
            raise InvalidInput(f"{where}key {key!r} is used by another block; keys must be unique",
                               field=f"{where}key")
        seen.add(key)
        blocks.append(Block(key, _text(raw, "text", MAX_TEXT, where=where),
                            _text(raw, "image_prompt", MAX_PROMPT, required=False, where=where)))
    return Draft(title, locale, theme, tuple(blocks))


@dataclass(frozen=True)
class PlannedTask:
    kind: str
    block_key: str | None
    input: dict
    fingerprint: str
    depends_on: tuple[str, ...] = field(default=())   # the refs ("kind:key") of the tasks it waits for

    @property
    def ref(self) -> str:
        return f"{self.kind}:{self.block_key or ''}"

    @property
    def medium(self) -> str:
        return kinds.get(self.kind).medium

    @property
    def delivered(self) -> bool:
        return kinds.get(self.kind).delivered


def plan_tasks(draft: Draft, setup: Mapping[str, Mapping]) -> list[PlannedTask]:
    """The tasks of a version, kind by kind (each after the kinds it waits for): a task per block of each per-block
    kind, one of each version-wide kind. `setup`: per kind, what its input takes from the settings (a provider's
    name, model, size, voice and options set; a local kind's options); a kind absent from it is off."""
    planned: dict[str, PlannedTask] = {}
    for kind in kinds.every():
        if kind.name not in setup:
            continue
        if kind.completes_version:
            waits = tuple(planned)
        else:
            waits = tuple(ref for ref, t in planned.items() if t.kind in kind.needs)
        for block in draft.blocks if kind.per_block else (None,):
            data = kind.plan(setup[kind.name], draft, block, planned)
            if data is None:
                continue
            task = PlannedTask(kind.name, block.key if block else None, data, digest(data), waits)
            planned[task.ref] = task
    order = {kind.name: i for i, kind in enumerate(kinds.every())}
    place = {block.key: i for i, block in enumerate(draft.blocks)}
    # block by block, then the version's own, each in the kinds' order (the tasks' ids follow it)
    return sorted(planned.values(), key=lambda t: (t.block_key is None, place.get(t.block_key, 0), order[t.kind]))


def stamped(task: PlannedTask, content_id: int, version: int) -> PlannedTask:
    """The task as saved: a stamped kind's input (the bundle's zip) names its content and version, so its
    fingerprint covers them too."""
    if not kinds.get(task.kind).stamped:
        return task
    data = {**task.input, "content_id": content_id, "version": version}
    return PlannedTask(task.kind, task.block_key, data, digest(data), task.depends_on)


def with_regeneration(block: Block, kind: str, nonce: str) -> Block:
    """The block asking for a new paid call for its `kind` of media."""
    marks = {**dict(block.regeneration), kind: nonce}
    return Block(block.key, block.text, block.image_prompt, tuple(sorted(marks.items())))


def block_from_snapshot(raw: Mapping) -> Block:
    """A block as a version's snapshot stores it (already validated when it was saved)."""
    marks = raw.get("regeneration") or {}
    return Block(raw["key"], raw["text"], raw.get("image_prompt"), tuple(sorted(marks.items())))


def carry_regenerations(draft: Draft, base_blocks: list[Mapping]) -> Draft:
    """A new draft keeps the regenerations of the base version's blocks whose media input it keeps.

    Without this, editing one block would send every regenerated block of the others back to the asset
    the editor rejected: the same text again means the old fingerprint, and so the old picture.
    """
    base = {b["key"]: block_from_snapshot(b) for b in base_blocks}
    blocks = []
    for block in draft.blocks:
        old = base.get(block.key)
        marks = {}
        if old is not None and not block.regeneration:
            if old.nonce("image") and (old.image_prompt or old.text) == (block.image_prompt or block.text):
                marks["image"] = old.nonce("image")
            if old.nonce("tts") and old.text == block.text:
                marks["tts"] = old.nonce("tts")
        blocks.append(Block(block.key, block.text, block.image_prompt, tuple(sorted(marks.items())))
                      if marks else block)
    return Draft(draft.title, draft.locale, draft.theme, tuple(blocks))


def check_narratable(draft: Draft, too_long: Callable[[str], str | None]) -> None:
    """InvalidInput naming the first block whose text the speech model would refuse as too long; `too_long` says
    why it would (providers/openai_models.py `speech_limit_refusal`), or None. Refused at the save, so no task is
    accepted that the provider then refuses (docs/decisions.md, "A block too long to narrate")."""
    for i, block in enumerate(draft.blocks):
        why = too_long(block.text)
        if why:
            raise InvalidInput(f"blocks[{i}] ({block.key}): the text is too long to narrate: {why}; split it into "
                               f"two blocks", field=f"blocks[{i}].text")


def check_speakable(locale: str, supported: tuple[str, ...]) -> None:
    """InvalidInput naming `locale` unless the speech provider speaks it; `supported` holds language
    prefixes ("zh", "en"), and an empty tuple means any language (the provider reads the text itself)."""
    if not supported:
        return
    lang = locale.lower().replace("_", "-")
    if not any(lang == p or lang.startswith(p + "-") for p in supported):
        raise InvalidInput(f"locale {locale!r} cannot be spoken by the configured speech provider; "
                           f"use one of: {', '.join(p + '(-*)' for p in supported)}", field="locale")


_UNSAFE = re.compile(r"[^\w.-]+")


def download_name(title: str, version: int, extension: str = "zip") -> str:
    """`<title>-v<version>.<extension>` with only letters (any script), digits, '.', '-' and '_'."""
    stem = _UNSAFE.sub("-", title).strip("-._")[:80].strip("-._") or "content"
    return f"{stem}-v{version}.{extension}"
