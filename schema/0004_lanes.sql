-- Lanes (docs/decisions.md, "Lanes"): a version is saved `interactive` (an editor waits for it) or
-- `bulk` (an import). Every outbox row carries the lane of its version, and the dispatcher sends it
-- to the kind's RQ queue of that lane (`image` or `image-bulk`, ...); workers listen to the
-- interactive queue first, so an editor's work is never queued behind bulk work.

CREATE TYPE lane AS ENUM ('interactive', 'bulk');

-- A version's lane is fixed at save, like the rest of the version.
ALTER TABLE versions ADD COLUMN lane lane NOT NULL DEFAULT 'interactive';

-- Copied from the version when the row is written (save, retry, re-send, unblocked dependents).
ALTER TABLE outbox ADD COLUMN lane lane NOT NULL DEFAULT 'interactive';

-- The dispatcher claims each lane on its own: due rows of one lane, oldest first.
CREATE INDEX outbox_due_by_lane ON outbox (lane, available_at) WHERE sent_at IS NULL;
