"""`bundle`: the version's delivery, a zip of manifest.json and every delivered file, made locally once every other
task of the version succeeded (pipeline/bundle.py). Its input names the content and version, so it is never reused
for another. Pure."""

from __future__ import annotations

from pipeline.core.kinds import Kind


def plan(setup, draft, block, planned) -> dict:
    """The title, the locale and, per block and for the version, the fingerprints of what it delivers. A version-wide
    medium (the video) is listed only when planned, so bundles of versions without one keep their fingerprints."""
    blocks = []
    for b in draft.blocks:
        entry = {"key": b.key, "text": b.text}
        for task in planned.values():
            if task.block_key == b.key and task.delivered:
                entry[task.medium] = task.fingerprint
        blocks.append(entry)
    data = {"kind": "bundle", "title": draft.title, "locale": draft.locale, "blocks": blocks}
    for task in planned.values():
        if task.block_key is None and task.delivered:
            data[task.medium] = task.fingerprint
    return data


KIND = Kind("bundle", "bundle", per_block=False, word="bundle", plan=plan, completes_version=True, stamped=True, delivered=False,
            work="pipeline.bundle:make")
