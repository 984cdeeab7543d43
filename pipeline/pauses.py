"""An operator's pause of the bulk lane: editors' work gets every worker and call slot while an import waits.

While the pause is open nothing of the bulk lane is claimed (`tasks_claim` asks `lane_paused`) or sent to
RQ (`outbox_claim_bulk`), so the workers and call slots go to the interactive lane as soon as the bulk calls
already in flight end; none of those is stopped. A bulk message already in Redis that a worker takes
claims nothing: its task gets a pending outbox row instead (`hold_if_paused`), sent after the resume.
Bulk saves are still admitted (202) and wait. No waiting bulk task fails for its deadline while the lane is
paused, and the resume moves each one's deadline on by the pause's length. Every pause is kept, with who
paused and resumed it (schema/0018_lane_pauses.sql). See docs/decisions.md, "Pausing the bulk lane".
"""

from __future__ import annotations

import psycopg

from pipeline import db
from pipeline.core.errors import Conflict
from pipeline.core.lanes import BULK
from pipeline.core.principal import Principal
from pipeline.log import log


def pause(conn: psycopg.Connection, *, by: Principal) -> dict:
    """`by` opens a pause of the bulk lane (its owner recorded with it); Conflict when one is open already (nothing
    changes then)."""
    with conn.transaction():
        row = db.one(conn, "lanes_pause", {"lane": BULK, "by": by.owner})
        if row is None:
            open_pause = db.one(conn, "lanes_open_pause", {"lane": BULK})
            raise Conflict(f"the bulk lane is paused already, since {open_pause['paused_at']:%Y-%m-%d %H:%M:%S %Z} "
                           f"by {open_pause['paused_by']}", code="already_paused")
    log("lane_paused", lane=BULK, by=by.owner, pause_id=row["id"])
    return row


def resume(conn: psycopg.Connection, *, by: Principal) -> dict:
    """`by` closes the open pause of the bulk lane and move its waiting tasks' deadlines on by the pause's length;
    Conflict when the lane is not paused (nothing changes then)."""
    with conn.transaction():
        row = db.one(conn, "lanes_resume", {"lane": BULK, "by": by.owner})
    if row is None:
        raise Conflict("the bulk lane is not paused", code="not_paused")
    log("lane_resumed", lane=BULK, by=by.owner, pause_id=row["id"], tasks_moved=row["tasks_moved"],
        paused_seconds=round((row["resumed_at"] - row["paused_at"]).total_seconds(), 1))
    return row


def current(conn: psycopg.Connection) -> dict | None:
    """The bulk lane's open pause (who, since when), or None: one index row, cheap enough for every page."""
    return db.one(conn, "lanes_open_pause", {"lane": BULK})


def state(conn: psycopg.Connection) -> dict:
    """The bulk lane as the API, the attention page and `bin/bulk status` show it: paused or not, since when
    and by whom, and how many of its tasks wait for a worker."""
    with conn.transaction():
        pause = current(conn)
        waiting = db.one(conn, "lanes_waiting", {"lane": BULK})["n"]
    return {"lane": BULK, "paused": pause is not None, "paused_at": pause and pause["paused_at"],
            "paused_by": pause and pause["paused_by"], "waiting": waiting}


def hold_if_paused(conn: psycopg.Connection, task_id: int) -> bool:
    """For a message whose claim found nothing: if its task's lane is paused, keep a message for it in the
    outbox until the resume, and say so."""
    with conn.transaction():
        return db.one(conn, "lanes_hold_paused", {"task_id": task_id})["paused"]
