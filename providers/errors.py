"""The providers' vocabulary of failure: how a call ended, as far as money is concerned.

`Provider.generate` raises only the four classes below, each a `ProviderError`; an adapter
translates whatever its transport raised into one of them, once, at its boundary:

* `Permanent`: refused for good (bad input, auth): do not retry; `Refused`, a `Permanent`, is
  the provider's safety system refusing the prompt itself, and `ModelGone`, another, a model it no longer serves;
* `Transient`: the request provably never reached the provider: safe to retry;
* `Ambiguous`: the request may have been executed (and charged): the outcome is unknown;
* `Busy`: rate limited or no free slot: try later without spending an attempt.

`ProviderConfigError` refuses a provider that cannot be built (or a fault that cannot be
armed) as asked; it is a `ValueError`, never raised by a call. The pipeline decides what each
class means for a task (pipeline/core/policy.py). This module imports nothing and does no I/O.

`PipelineError` is the root of every error the system raises on purpose, the providers' and the
pipeline's alike (pipeline/core/errors.py re-exports it with the pipeline's own): it lives here, on
the lowest floor, because the providers import nothing of ours.
"""

from __future__ import annotations


class PipelineError(Exception):
    """The root of every error the system raises on purpose: a provider's and the pipeline's."""


class ProviderError(PipelineError):
    """A provider call did not produce a result; `ledger_outcome` is what the call ledger calls it."""

    @property
    def ledger_outcome(self) -> str:
        return self.__class__.__name__.lower()

    def __init__(self, message: str, *, http_status: int | None = None) -> None:
        super().__init__(message)
        self.http_status = http_status


class Permanent(ProviderError):
    """The provider refused the request for good (bad input, auth): do not retry."""


class Refused(Permanent):
    """The provider's safety system refused this prompt (OpenAI: 400, code `moderation_blocked`): a person must
    rewrite it; the same input is not sent again unless a person asks."""


class ModelGone(Permanent):
    """The provider no longer serves the model asked for (OpenAI: 404, code `model_not_found`, as it answers a model
    it has shut down): no call with it can succeed until a person sets a live model. The call ledger books it as
    the refusal it is (`permanent`)."""

    ledger_outcome = "permanent"


class Transient(ProviderError):
    """The request provably never reached the provider: safe to retry."""


class Ambiguous(ProviderError):
    """The request may have been executed (and charged): the outcome is unknown."""


class Busy(ProviderError):
    """Rate limited or no free slot: try later without spending an attempt."""

    def __init__(self, message: str, *, retry_after: float = 1.0, http_status: int | None = None) -> None:
        super().__init__(message, http_status=http_status)
        self.retry_after = retry_after


class ProviderConfigError(PipelineError, ValueError):
    """A provider cannot be built, or a fault armed, as asked; the message names the setting and the fix."""
