"""The domain: content versions, tasks and their state machine, admission, claim/lease/heartbeat/
fencing, retry policy, outbox dispatch, reconciliation and the delivery gate. Never imports `web`.

Decisions are made in `core/` (pure: no I/O) and written by the thin modules around it; every
task that leaves `running` does so through `tasks.apply`. One attempt of a task
reads top to bottom in `attempt.py`; docs/architecture.md ("An attempt") tells its path and draws
the whole house.
"""
