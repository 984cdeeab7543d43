"""The provider interface: what a media provider takes, returns and raises.

This module owns the request/result value types, the three answers of a
lookup, and the `Provider` protocol every adapter satisfies. It does no I/O
and knows nothing of tasks, receipts or databases. Adapters raise only the
four classified errors of `providers.errors` (Permanent, Transient, Ambiguous,
Busy) from `generate`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

KINDS = ("image", "audio")


@dataclass(frozen=True)
class GenerateRequest:
    """One paid call: what to make (`kind`), from which text, with which parameters.

    `params` carries the provider options (model, size for images; voice,
    locale for audio; `options`, the model options such as quality or
    instructions). `idempotency_key` is stable per task input, so a
    provider that honours it answers a repeat with the first result.
    """

    kind: str
    text: str
    params: Mapping[str, Any] = field(default_factory=dict)
    idempotency_key: str = ""
    seconds_left: float | None = None   # time before the task's total deadline: the call ends by then

    def __post_init__(self) -> None:
        # A read-only view, so a frozen request cannot be changed through its params.
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))


@dataclass(frozen=True)
class Result:
    """What a successful call produced: the media bytes and what we know about them."""

    data: bytes = field(repr=False)
    media_type: str
    provider_request_id: str
    metadata: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        # The bytes can be megabytes long; a repr shows their size instead.
        return (
            f"Result(media_type={self.media_type!r}, bytes={len(self.data)}, "
            f"provider_request_id={self.provider_request_id!r}, metadata={self.metadata!r})"
        )


@dataclass(frozen=True)
class Found:
    """Lookup answer: the provider remembers this key and here is its result."""

    result: Result


@dataclass(frozen=True)
class NoRecord:
    """Lookup answer: the provider has no record of this key (it never executed it)."""


@dataclass(frozen=True)
class Unsupported:
    """Lookup answer: this provider cannot be asked what happened to a key."""


LookupAnswer = Found | NoRecord | Unsupported


@runtime_checkable
class Provider(Protocol):
    """A media provider as the pipeline sees it.

    `honours_idempotency_key` says whether a repeated key returns the first
    result instead of executing (and charging) again. `supports_lookup` says
    whether `lookup` can answer anything but `Unsupported()`.
    """

    name: str
    model: str
    honours_idempotency_key: bool
    supports_lookup: bool

    def generate(self, request: GenerateRequest) -> Result:
        """Make the media; raise only Permanent, Transient, Ambiguous or Busy."""
        ...

    def lookup(self, idempotency_key: str) -> LookupAnswer:
        """Tell what happened to a request made with this key, if the provider can."""
        ...
