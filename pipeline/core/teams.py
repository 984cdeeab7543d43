"""Teams: who may see which content. Pure.

Every API key and every content belongs to one team; a content belongs to the team of the key that created it.
A key sees and acts on its own team's contents only, and another team's content is answered exactly as a missing
one (404, the same words), so a caller cannot tell the two apart. Admins act across teams; what an admin changes in
another team's content is recorded with the admin's team (pipeline/teams.py).
"""

from __future__ import annotations

import re

from pipeline.core.errors import InvalidInput

DEFAULT_TEAM = "default"   # where the keys and contents from before teams live, and a new key without --team
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")
ACROSS_TEAMS = "admin"     # the one role that sees every team's contents


def team_name(name: str | None) -> str:
    """A team's name as stored: 1 to 40 lowercase letters, digits, '-' or '_', starting with a letter or digit."""
    name = (name or "").strip()
    if not _NAME.fullmatch(name):
        raise InvalidInput(f"team {name!r} is not a team name: 1 to 40 lowercase letters, digits, '-' or '_', "
                           "starting with a letter or digit (e.g. 'physics-dept')", field="team")
    return name


def scope(role: str, team: str) -> str | None:
    """The team whose contents a key of `role` in `team` sees; None: every team's."""
    return None if role == ACROSS_TEAMS else team


def sees(role: str, team: str, content_team: str | None) -> bool:
    """Whether such a key sees a content of `content_team` (None: no such content)."""
    return content_team is not None and scope(role, team) in (None, content_team)


def across(role: str, team: str, content_team: str) -> bool:
    """Whether acting on that content crosses teams (an admin's, recorded with the admin's team)."""
    return scope(role, team) is None and team != content_team
