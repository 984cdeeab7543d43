-- A task whose provider no longer serves its model (OpenAI: 404 `model_not_found`, as for a shut-down model) is its
-- own reason, apart from other permanent errors: the fix is a setting (a live *_MODEL), then a retry. Its own file:
-- a new enum value cannot be used in the transaction that adds it.
ALTER TYPE task_reason ADD VALUE IF NOT EXISTS 'model_gone' AFTER 'refused';
