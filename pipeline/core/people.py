"""Who a recorded name is: owners compared as people are, not as strings. Pure.

A key's owner names every action it takes, and the four-eyes rule asks whether the person approving a version
is the one who saved it. `ALICE@example.com` and `alice@example.com`, or a name typed with full-width letters,
are one person: names are compared (and stored, from now on) in Unicode NFKC, case-folded, without the spaces
around them.
"""

from __future__ import annotations

import unicodedata


def person(name: str) -> str:
    """The form of an owner's name that is stored and compared."""
    return unicodedata.normalize("NFKC", name or "").casefold().strip()


def same_person(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and person(a) == person(b)
