-- The one definition of a ledger outcome after which the provider may have charged us: the call answered
-- (succeeded) or its answer was lost after sending (ambiguous). Every query and read model asks this function.
CREATE FUNCTION call_may_have_charged(outcome text) RETURNS boolean
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    RETURN outcome IN ('succeeded', 'ambiguous');
