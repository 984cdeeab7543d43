"""Who is calling, and what each role may do. Pure.

Every operation a person starts (a save, a cancel, an approval, a retry, a rerun, a regeneration) is given one
`Principal`: its owner names the recorded action, its key is the one whose limits and daily spend the action counts
against, and its team is the team of a content it creates. An API key's principal carries its key's id (0 for the
demo door); a caller that holds no key, a command-line tool or a test run against the database, has none
(`Principal.without_key`), and nothing is counted against a key for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.core.teams import DEFAULT_TEAM, scope

ROLES = ("editor", "reviewer", "admin", "delivery")

# What each role may do. Admin may do everything; `delivery` (an integration that fetches approved bundles)
# may only read delivery manifests, whose signed links serve their media: no drafts, prompts, receipts or spend.
PERMISSIONS: dict[str, frozenset[str]] = {
    "editor": frozenset({"read", "edit", "deliver"}),
    "reviewer": frozenset({"read", "review", "deliver"}),
    "admin": frozenset({"read", "edit", "review", "admin", "deliver"}),
    "delivery": frozenset({"deliver"}),
}


@dataclass(frozen=True)
class Principal:
    """Who is calling: the owner names every recorded action; the team bounds what it sees and owns what it creates;
    `key_id` is the API key acting (None: no key, so no key's limits or spend apply)."""

    key_id: int | None
    owner: str
    role: str
    team: str

    @classmethod
    def without_key(cls, owner: str, *, role: str, team: str = DEFAULT_TEAM) -> Principal:
        """A caller that holds no API key: a command-line tool run by whoever holds the database, or a test. Its
        `role` is what it acts as; no key's permission was checked on the way in, so the caller says it."""
        return cls(None, owner, role, team)

    def may(self, permission: str) -> bool:
        return permission in PERMISSIONS.get(self.role, frozenset())

    @property
    def scope(self) -> str | None:
        """The team whose contents this principal sees; None: every team's (an admin)."""
        return scope(self.role, self.team)
