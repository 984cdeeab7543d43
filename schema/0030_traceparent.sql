-- Traces (docs/tracing.md): the save writes its W3C traceparent on the version it makes, in its transaction, so
-- the processes that carry the version's work on (the dispatcher, each worker's claim, the webhook sender) continue
-- the save's trace; the RQ message carries task ids only. NULL when tracing was off for the save.
ALTER TABLE versions ADD COLUMN traceparent text
    CONSTRAINT versions_traceparent_check CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');
