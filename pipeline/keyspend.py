"""One API key's daily spend: every action that can cause a paid call books its estimate against KEY_DAILY_SPEND.

Saves and imports, regenerations (a save), retries, reruns and bulk retries each book, in the transaction that
admits their work, the estimated cost of the paid calls they may cause: their media tasks whose input has no
stored asset yet, at `*_COST_PER_CALL`. A booking that would pass the key's limit for the UTC day raises in the
server (book_key_spend), so the action rolls back whole and is refused with 429 (pipeline/versions.py). The
estimate errs high (a task may still reuse an asset another task makes first) and is never given back, so a
stolen key spends at most its limit a day, whatever it asks for. The same estimate is booked against the team of
each content the tasks belong to (TEAM_DAILY_SPEND, 429 alike), so a team bounds its keys together. The provider budgets (spend.py) bound what
all keys together spend. Revoking a key can cancel its unstarted work (pipeline/keys.py `cancel_pending`).
"""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb

from pipeline import db
from pipeline.settings import Settings


def book(conn: psycopg.Connection, cfg: Settings, key_id: int | None, *, content_id: int | None = None,
         version: int | None = None, task_ids: list[int] | None = None) -> None:
    """Book, in the caller's transaction (or pipeline), what the action's tasks may cost: the tasks of
    `content_id`/`version`, or `task_ids`. Nothing for an action without a key, or with nothing to cost."""
    costs = {kind: p.cost_per_call for kind, p in cfg.providers.items()}
    if key_id is None or not any(cost > 0 for cost in costs.values()):
        return
    db.execute(conn, "key_spend_book", {
        "key_id": key_id, "content_id": content_id, "version": version, "task_ids": task_ids,
        "costs": Jsonb(costs), "limit": cfg.key_daily_spend, "team_limit": cfg.team_daily_spend})

