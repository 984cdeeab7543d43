"""Two versions of a content side by side: blocks added, removed, changed (with a text diff by word or, for
Chinese and Japanese, by character), and per media
whether the newer side reused the older one's asset, made a new one, or left it behind. Pure: no I/O.

`compare(old, new)` takes each side as a `Side` (its blocks and its media tasks with their cost) and
returns a document for the API and the compare page. A media row's `change` is
- `reused`: the same input on both sides, so the same asset without a new call;
- `new`: an input the older side did not have (a changed or added block, or a regeneration);
- `superseded`: the older side's media of a block the newer side no longer has.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from functools import lru_cache

from pipeline.core.ledger import dollars
from pipeline.core import kinds


@dataclass(frozen=True)
class Side:
    version: int
    title: str
    locale: str
    theme: str | None
    blocks: list[dict]
    tasks: list[dict] = field(default_factory=list)    # id, kind, block_key, status, fingerprint, asset_sha256, cost


# A diff costs up to len(old) x len(new) steps in tokens; past this many it is done by sentence first, and only
# sentences this short are compared by token within. A whole compare of 100 blocks of 3,000 characters
# then stays in the milliseconds instead of seconds (docs/security.md, "Bounded input").
CHAR_DIFF_CELLS = 250_000
SENTENCE_CHARS = 400
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;\n])|(?<=[.] )")
# Languages written without spaces between words (by the locale's language subtag): compared by character.
UNSPACED = frozenset({"zh", "cmn", "yue", "wuu", "hak", "nan", "ja", "th", "lo", "km", "my", "bo"})
# Han, kana and CJK compatibility ideographs: one token each, in any language's text.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORDS = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|\s+|.", re.S)


def by_word(locale: str | None) -> bool:
    """Whether text of this locale (a BCP 47 tag: `en-GB`, `zh-CN`) is compared by word: its language separates
    words with spaces. Unknown or empty: by word (a Chinese or Japanese character is its own token anyway)."""
    language = (locale or "").replace("_", "-").split("-")[0].lower()
    return language not in UNSPACED


def text_diff(old: str, new: str, locale: str | None = None) -> list[dict]:
    """The change from `old` to `new` as segments `{"op": "equal"|"delete"|"insert", "text"}`: by word for a
    language that separates words with spaces (a Han or kana character being a word of its own), by character for
    one that does not (`locale`, see `by_word`); for texts of unbounded size by sentence first, with tokens within
    short changed sentences. Changes separated only by a space read as one. Merged into runs. Cached: the same two
    texts always give the same segments."""
    return [dict(segment) for segment in _diff(old, new, by_word(locale))]


def _tokens(text: str, words: bool) -> list[str]:
    return _WORDS.findall(text) if words else list(text)


@lru_cache(maxsize=2048)
def _diff(old: str, new: str, words: bool) -> tuple[dict, ...]:
    a_tokens, b_tokens = _tokens(old, words), _tokens(new, words)
    if len(a_tokens) * len(b_tokens) <= CHAR_DIFF_CELLS:
        return tuple(_merge(_joined(_token_segments(a_tokens, b_tokens))))
    a, b = _sentences(old), _sentences(new)
    segments: list[dict] = []
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        before, after = "".join(a[a0:a1]), "".join(b[b0:b1])
        if op == "equal":
            segments.append({"op": "equal", "text": before})
        elif op == "replace" and len(before) <= SENTENCE_CHARS and len(after) <= SENTENCE_CHARS:
            segments.extend(_joined(_token_segments(_tokens(before, words), _tokens(after, words))))
        else:
            segments += [{"op": "delete", "text": before}] if before else []
            segments += [{"op": "insert", "text": after}] if after else []
    return tuple(_merge(segments))


def _token_segments(old: list[str], new: list[str]) -> list[dict]:
    segments: list[dict] = []
    for op, a0, a1, b0, b1 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op in ("equal", "delete", "replace") and a1 > a0:
            segments.append({"op": "equal" if op == "equal" else "delete", "text": "".join(old[a0:a1])})
        if op in ("insert", "replace") and b1 > b0:
            segments.append({"op": "insert", "text": "".join(new[b0:b1])})
    return segments


def _joined(segments: list[dict]) -> list[dict]:
    """Changes with only white space between them as one change: its deletions, then its insertions (the space
    on both sides), so "big dog" -> "small cat" reads as two phrases, not four interleaved words."""
    out: list[dict] = []
    i = 0
    while i < len(segments):
        if segments[i]["op"] == "equal":
            out.append(segments[i])
            i += 1
            continue
        gone, came, j = "", "", i
        while j < len(segments):
            segment = segments[j]
            if segment["op"] == "equal":
                if segment["text"].isspace() and j + 1 < len(segments) and segments[j + 1]["op"] != "equal":
                    gone, came = gone + segment["text"], came + segment["text"]
                    j += 1
                    continue
                break
            gone += segment["text"] if segment["op"] == "delete" else ""
            came += segment["text"] if segment["op"] == "insert" else ""
            j += 1
        out += [{"op": "delete", "text": gone}] if gone else []
        out += [{"op": "insert", "text": came}] if came else []
        i = j
    return out


def _sentences(text: str) -> list[str]:
    return [part for part in _SENTENCE_END.split(text) if part]


def _merge(segments: list[dict]) -> list[dict]:
    merged: list[dict] = []
    for segment in segments:
        if merged and merged[-1]["op"] == segment["op"]:
            merged[-1] = {"op": segment["op"], "text": merged[-1]["text"] + segment["text"]}
        else:
            merged.append(dict(segment))
    return merged


def _media_side(task: dict | None) -> dict | None:
    if task is None:
        return None
    return {"task_id": task["id"], "status": task["status"], "sha256": task["asset_sha256"],
            "cost": dollars(task.get("cost")), "paid_calls": int(task.get("paid_calls") or 0),
            "reused_asset": bool(task.get("reused")), "regeneration": (task.get("input") or {}).get("regeneration")}


def _media_row(key: str, kind: str, old: dict | None, new: dict | None) -> dict:
    if new is None:
        change = "superseded"
    elif old is not None and old["fingerprint"] == new["fingerprint"]:
        change = "reused"
    else:
        change = "new"
    regenerated = bool(new and (new.get("input") or {}).get("regeneration")
                       and (old is None or (old.get("input") or {}).get("regeneration")
                            != (new.get("input") or {}).get("regeneration")))
    return {"block": key, "kind": kind, "medium": kinds.get(kind).medium, "change": change, "regenerated": regenerated,
            "from": _media_side(old), "to": _media_side(new)}


def _block_change(old: dict | None, new: dict | None) -> str:
    if old is None:
        return "added"
    if new is None:
        return "removed"
    if (old["text"], old.get("image_prompt")) != (new["text"], new.get("image_prompt")):
        return "changed"
    return "unchanged"


def compare(old: Side, new: Side) -> dict:
    """What changed from `old` to `new`, block by block and media by media, with each side's cost."""
    old_blocks = {b["key"]: b for b in old.blocks}
    new_blocks = {b["key"]: b for b in new.blocks}
    order = [b["key"] for b in new.blocks] + [k for k in old_blocks if k not in new_blocks]
    old_tasks = {(t["kind"], t["block_key"]): t for t in old.tasks}
    new_tasks = {(t["kind"], t["block_key"]): t for t in new.tasks}
    blocks, media = [], []
    for key in order:
        before, after = old_blocks.get(key), new_blocks.get(key)
        change = _block_change(before, after)
        row = {"key": key, "change": change, "from": before, "to": after}
        if change == "changed":
            row["text_diff"] = text_diff(before["text"], after["text"], new.locale)
            row["prompt_diff"] = text_diff(before.get("image_prompt") or "", after.get("image_prompt") or "",
                                           new.locale)
        blocks.append(row)
        for kind in (k.name for k in kinds.media()):
            if (kind, key) in old_tasks or (kind, key) in new_tasks:
                media.append(_media_row(key, kind, old_tasks.get((kind, key)), new_tasks.get((kind, key))))
    counts = {c: sum(1 for b in blocks if b["change"] == c) for c in ("added", "removed", "changed", "unchanged")}
    media_counts = {c: sum(1 for m in media if m["change"] == c) for c in ("reused", "new", "superseded")}
    header = {name: {"from": getattr(old, name), "to": getattr(new, name)} for name in ("title", "locale", "theme")
              if getattr(old, name) != getattr(new, name)}
    return {"from_version": old.version, "to_version": new.version, "changed_fields": header,
            "blocks": blocks, "media": media, "block_counts": counts, "media_counts": media_counts,
            "cost": {"from": _total(old.tasks), "to": _total(new.tasks)}}


def _total(tasks: list[dict]) -> float:
    return round(sum(float(t.get("cost") or 0) for t in tasks), 6)
