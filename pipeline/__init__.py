"""The domain core: content versions, tasks and their state machine, admission,
claim/lease/heartbeat/fencing, retry policy, outbox dispatch, reconciliation and
the delivery gate. Never imports `web`."""
