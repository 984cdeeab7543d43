"""The one check of who may see a content: every route that names a content or a task asks here first.

A key sees its own team's contents only (pipeline/core/teams.py); anything else is the NotFound a missing content
or task raises, word for word. An admin's change in another team's content is recorded in that content's history
with the admin's team before it is made (`cross_team` event), so the team that owns the content can see who
acted on it from outside.
"""

from __future__ import annotations

import psycopg

from pipeline import db, events
from pipeline.core import teams as rules
from pipeline.core.errors import NotFound
from pipeline.core.principal import Principal


def list_teams(conn: psycopg.Connection) -> list[dict]:
    return db.all(conn, "teams_list")


def check(conn: psycopg.Connection, principal: Principal, *, content_id: int | None = None,
          task_id: int | None = None, changes: str | None = None) -> None:
    """Raise NotFound, exactly as for a missing one, when the principal's team does not see the content or task.

    `changes`: what the request is about to change (e.g. "POST /api/tasks/7/retry"); an admin crossing teams is
    recorded then, with the admin's team."""
    if content_id is not None:
        _seen(conn, principal, db.scalar(conn, "teams_of_content", {"content_id": content_id}),
              f"content {content_id}", changes, content_id=content_id)
    if task_id is not None:
        _seen(conn, principal, db.scalar(conn, "teams_of_task", {"task_id": task_id}), f"task {task_id}", changes,
              task_id=task_id)


def _seen(conn: psycopg.Connection, principal: Principal, team: str | None, what: str, changes: str | None, *,
          content_id: int | None = None, task_id: int | None = None) -> None:
    if not rules.sees(principal.role, principal.team, team):
        raise NotFound(f"{what} does not exist")
    if changes and rules.across(principal.role, principal.team, team):
        _record_across(conn, principal, team, changes, content_id=content_id, task_id=task_id)


def _record_across(conn: psycopg.Connection, principal: Principal, team: str, changes: str, *,
                   content_id: int | None, task_id: int | None) -> None:
    with conn.transaction():
        where = db.one(conn, "tasks_get", {"task_id": task_id}) if content_id is None else None
        events.record(conn, content_id=content_id if where is None else where["content_id"],
                      version=None if where is None else where["version"], task_id=task_id, action="cross_team",
                      actor=principal.owner, reason=f"{principal.role} of team {principal.team} in team {team}: "
                                                    f"{changes}",
                      details={"actor_team": principal.team, "content_team": team, "request": changes})


def sees_asset(conn: psycopg.Connection, principal: Principal, sha256: str) -> bool:
    """Whether a stored asset is the media of a content the principal's team sees."""
    return bool(db.scalar(conn, "teams_of_asset",
                          {"sha256": sha256, "team": rules.scope(principal.role, principal.team)}))
