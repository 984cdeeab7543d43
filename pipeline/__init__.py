"""The domain: content versions, tasks and their state machine, admission, claim/lease/heartbeat/
fencing, retry policy, outbox dispatch, reconciliation and the delivery gate. Never imports `web`.

Decisions are made in `core/` (pure: no I/O) and written by the thin modules around it; every
task that leaves `running` does so through `tasks.apply`. The execution path of one attempt:
`jobs.run_task` (the RQ job) -> `leases.claim_and_take` (with `executor.prepare`) -> `executor`
(the paid call and its receipts) -> `tasks.succeed` / `tasks.fail_attempt` -> `tasks.apply`, with the
call's ledger row (`ledger`) and slot in the same transaction. docs/architecture.md
draws the whole house.
"""
