-- The editors' review workflow: version decisions read from the audit trail, and regenerated assets kept.
--
-- A reviewer's decisions about a version (approved, rejected, changes requested, approval withdrawn) and an
-- editor's regeneration are events without a task, or with the regenerated task. No new table: the events
-- are the version's history. These indexes keep the reads that the delivery gate and the board make bounded.

-- The latest decision about a content's versions (delivery says why an approval was withdrawn).
CREATE INDEX events_version_decisions ON events (content_id, id)
    WHERE task_id IS NULL AND action IN ('approved', 'rejected', 'changes_requested', 'approval_withdrawn');

-- An asset replaced by a regeneration is kept: retention asks this index before deleting one.
CREATE INDEX events_replaced_assets ON events ((details->>'replaced_sha256'))
    WHERE action = 'regenerated';
