-- An operator pauses the bulk lane (an import) so editors' work has every worker and call slot, then resumes it.
-- While a pause is open (resumed_at IS NULL) no bulk task is claimed or sent to RQ, and none fails for its
-- deadline: the resume moves every waiting bulk task's deadline on by the pause's length. Saves are still
-- admitted. Each pause stays as a row: who paused, who resumed, when.
CREATE TABLE lane_pauses (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    lane       lane NOT NULL CHECK (lane = 'bulk'),
    paused_at  timestamptz NOT NULL DEFAULT now(),
    paused_by  text NOT NULL,
    resumed_at timestamptz,
    resumed_by text,
    CHECK ((resumed_at IS NULL) = (resumed_by IS NULL))
);
CREATE UNIQUE INDEX lane_pauses_open ON lane_pauses (lane) WHERE resumed_at IS NULL;

-- lane_paused: whether a version's lane is paused now (the claim, the bulk dispatch and the deadline all ask it)
CREATE FUNCTION lane_paused(lane) RETURNS boolean LANGUAGE sql STABLE PARALLEL SAFE
    RETURN EXISTS (SELECT 1 FROM lane_pauses p WHERE p.lane = $1 AND p.resumed_at IS NULL);
