-- The approval record is the event history (pipeline/core/approvals.py): who approved, withdrew or replaced which
-- version, and when. The stamp a version kept of its first approval outlived withdrawals and named the first
-- approver after someone else approved it again; nothing reads it any more, and every approval and withdrawal it
-- summed up is in `events` (written in the same transaction since 0001). This release neither reads nor writes it;
-- the columns stay until no running release reads them (during a rolling deploy the release before runs beside
-- this one and still selects them), and a later migration drops them.
COMMENT ON COLUMN versions.approved_at IS 'unused since 0029 (the approval record is the event history); to be dropped';
COMMENT ON COLUMN versions.approved_by IS 'unused since 0029 (the approval record is the event history); to be dropped';
