-- A prompt the provider's safety system refused (OpenAI: HTTP 400, error code `moderation_blocked`) is its own
-- reason, apart from other permanent errors: an editor must rewrite it. Its own file: a new enum value cannot be
-- used in the transaction that adds it.
ALTER TYPE task_reason ADD VALUE IF NOT EXISTS 'refused' AFTER 'permanent_error';
