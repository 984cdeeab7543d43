-- Why a task is where its last decision put it, and one definition of "its dependencies succeeded".

-- The decision codes of pipeline/core/outcome.py (`Reason`; a test checks that both list the same values).
CREATE TYPE task_reason AS ENUM
    ('succeeded', 'reused', 'recovered', 'transient', 'busy', 'waiting_input', 'budget', 'unknown_outcome',
     'unclassified_error', 'permanent_error', 'attempts_exhausted', 'deadline_passed', 'lease_expired',
     'not_executed', 'cancelled', 'resolved');

-- The code of the decision that recorded `last_error`, written with it (pipeline.tasks.apply, the deadline
-- and resolve queries), so the board says the error in words without searching its text.
ALTER TABLE tasks ADD COLUMN last_error_code task_reason;
ALTER TABLE tasks ADD CONSTRAINT tasks_code_names_an_error CHECK (last_error_code IS NULL OR last_error IS NOT NULL);

-- Errors recorded before this migration: the code their text names, as the board used to read it.
UPDATE tasks SET last_error_code = CASE
    WHEN last_error ILIKE '%outcome unknown%' THEN 'unknown_outcome'
    WHEN last_error ILIKE '%unclassified error%' THEN 'unclassified_error'
    WHEN last_error LIKE 'busy (WaitingForInput:%' THEN 'waiting_input'
    WHEN last_error LIKE 'busy (BudgetReached:%' THEN 'budget'
    WHEN last_error ILIKE '%busy%' THEN 'busy'
    WHEN last_error ILIKE '%transient%' THEN 'transient'
    WHEN last_error ILIKE '%permanent%' THEN 'permanent_error'
    WHEN last_error ILIKE '%deadline passed%' THEN 'deadline_passed'
    WHEN last_error ILIKE '%lease expired%' THEN 'lease_expired'
    WHEN last_error ILIKE '%resolved:%' THEN 'resolved'
END::task_reason
WHERE last_error IS NOT NULL;

-- A task's dependencies that have not succeeded (yet): a task may run, or be queued, only when it has none.
-- The claim, the release of dependents, the reconciler's re-sends and the gauges all ask this one view.
CREATE VIEW task_unmet_deps AS
SELECT d.task_id, d.depends_on, x.status AS depends_on_status
FROM task_deps d JOIN tasks x ON x.id = d.depends_on
WHERE x.status <> 'succeeded';
