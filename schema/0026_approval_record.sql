-- The approval record is the event history (pipeline/core/approvals.py): who approved, withdrew or replaced which
-- version, and when. The stamp a version kept of its first approval outlived withdrawals and named the first
-- approver after someone else approved it again; nothing reads it any more, and every approval and withdrawal it
-- summed up is in `events` (written in the same transaction since 0001), so it goes.
ALTER TABLE versions DROP COLUMN approved_at, DROP COLUMN approved_by;
