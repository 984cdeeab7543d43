-- Replays that keep history, and periodic runs keyed by their time slot.

-- A dead letter is kept when its task is replayed: it is marked replayed (by whom, when, why), and a task that
-- fails again gets a new one. So a task has many dead letters over its life, and at most one open.
ALTER TABLE dead_letters DROP CONSTRAINT dead_letters_pkey;
ALTER TABLE dead_letters ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
ALTER TABLE dead_letters ADD COLUMN replayed_at timestamptz;
ALTER TABLE dead_letters ADD COLUMN replayed_by text;
ALTER TABLE dead_letters ADD COLUMN replay_why text;
ALTER TABLE dead_letters ADD CONSTRAINT dead_letters_replay_recorded
    CHECK ((replayed_at IS NULL) = (replayed_by IS NULL) AND (replayed_at IS NULL) = (replay_why IS NULL));
CREATE UNIQUE INDEX dead_letters_open ON dead_letters (task_id) WHERE replayed_at IS NULL;
CREATE INDEX dead_letters_of_task ON dead_letters (task_id, id);

-- One row per replay: a new run of a dead-lettered task, pointing at the dead letter of the run it repeats.
-- Its attempts are those numbered from `first_attempt`; the deadline moves only when the editor asked for it.
CREATE TABLE replays (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id         bigint NOT NULL REFERENCES tasks (id),
    replay_of       bigint NOT NULL UNIQUE REFERENCES dead_letters (id),
    first_attempt   integer NOT NULL CHECK (first_attempt >= 1),
    max_attempts    integer NOT NULL CHECK (max_attempts >= first_attempt),
    replayed_by     text NOT NULL,
    why             text NOT NULL CHECK (length(why) BETWEEN 1 AND 2000),
    deadline_before timestamptz NOT NULL,
    deadline_after  timestamptz NOT NULL CHECK (deadline_after >= deadline_before),
    at              timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX replays_of_task ON replays (task_id, id);

-- Periodic runs keyed by job and slot: a second run of the same slot, on any machine, inserts nothing and does
-- nothing. A run without a slot (a loop, a manual run) is recorded as before. `missed_before` counts the slots
-- of the same job that passed without a run before this one.
ALTER TABLE reconcile_runs ADD COLUMN job text NOT NULL DEFAULT 'reconcile';
ALTER TABLE reconcile_runs ADD COLUMN slot timestamptz;
ALTER TABLE reconcile_runs ADD COLUMN slot_seconds integer CHECK (slot_seconds >= 1);
ALTER TABLE reconcile_runs ADD COLUMN missed_before integer NOT NULL DEFAULT 0 CHECK (missed_before >= 0);
ALTER TABLE reconcile_runs ADD CONSTRAINT reconcile_runs_slot_has_length CHECK ((slot IS NULL) = (slot_seconds IS NULL));
CREATE UNIQUE INDEX reconcile_runs_one_per_slot ON reconcile_runs (job, slot) WHERE slot IS NOT NULL;
