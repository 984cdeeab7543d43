-- The identity of the receipt store a worker wrote its attempt's receipts to, recorded with the claim.
-- The reconciler reads a missing intent receipt as "never called" only when its own store has this
-- identity; otherwise the receipt may exist where it cannot look, and the task becomes `unknown`.
-- Tasks claimed before this column existed have none, and are treated as out of sight.
ALTER TABLE tasks ADD COLUMN receipt_store text;
