"""The kinds of work a version fans out into, one module each, and the registry every other part reads. Pure.

A kind says everything the pipeline must know of it: its name (the task kind, its RQ queues `<name>` and
`<name>-bulk`, its worker pools, the API's word), its medium (the asset's key in a block's board, the manifest and
the catalogs; the `kind` hashed into its input), whether it is made per block or once per version, which kinds of
the same version it waits for, whether it is a paid provider call (receipts, call slots, spend, `unknown`
outcomes) or local work (any failure may simply be retried), its settings' prefix, how a version's draft becomes
its input, and, for a paid kind, how its call is priced; for local work, the function that makes its asset.

The built-in kinds are the modules of this package (`BUILT_IN`); a deployment adds its own with `KINDS_FROM`
(module names, each with a `KIND`), read by `pipeline/settings.py`, which calls `register`. PostgreSQL keeps what
its functions need of each kind as rows of `task_kinds` (paid, completes the version), written from here by
`bin/migrate` (`pipeline/migrations.py`), so no SQL names a kind. docs/architecture.md, "Adding a kind".
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


@dataclass(frozen=True)
class Kind:
    name: str
    medium: str
    per_block: bool
    plan: Callable[..., dict | None]      # (setup, draft, block or None, planned so far by ref) -> input, None: none
    needs: tuple[str, ...] = ()           # kinds of the same version whose every task this one waits for
    paid: bool = False
    setting: str = ""                     # settings' prefix (IMAGE_*); by default the name in capitals
    completes_version: bool = False       # its success makes the version deliverable (the bundle)
    stamped: bool = False                 # its input names the content and version (never reused across them)
    delivered: bool = True                # its asset is a file of the bundle and the manifest
    estimate: Callable[..., float | None] | None = None   # paid: (provider settings, input, batch) -> dollars
    reported: Callable[..., float | None] | None = None   # paid: (provider settings, input, answer metadata)
    request: Callable[[dict], tuple[str, dict]] | None = None   # paid: input -> (the provider's text, params)
    work: str = ""                        # local: "module:function" making the asset (pipeline/localwork.py)
    options: Mapping[str, tuple[Callable[[str], Any], Any]] = field(default_factory=dict)  # its own settings
    # paid: its provider's settings' defaults (pipeline/settings.py ProviderSettings), each backend's own model, size
    # and voice, and the model options it takes with the values each accepts (None: any text)
    provider_defaults: Mapping[str, Any] = field(default_factory=dict)
    backend_defaults: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    provider_options: Mapping[str, tuple[str, ...] | None] = field(default_factory=dict)
    probe: Mapping[str, Any] = field(default_factory=dict)   # paid: the input one call's listed price is quoted for
    word: str = ""                        # what an editor calls one (English; the catalogs translate)
    batchable: bool = False               # paid: its bulk lane may go through the Batch API (IMAGE_BULK_BACKEND)
    enabled_by_default: bool = True
    workers: int = 1                      # local work: the worker pools' default sizes
    interactive_workers: int = 1

    @property
    def prefix(self) -> str:
        return self.setting or self.name.upper()

    @property
    def shared(self) -> bool:
        """Whether tasks of several versions or contents may ask for the same input: it is then held while one of
        them makes it (no second call, no second render) and reused once made. A stamped input never is."""
        return not self.stamped


_REGISTRY: dict[str, Kind] = {}
BUILT_IN = ("pipeline.core.kinds.image", "pipeline.core.kinds.tts", "pipeline.core.kinds.video",
            "pipeline.core.kinds.bundle")


def register(kind: Kind) -> Kind:
    """Add a kind (again: replaced by name). ValueError when its name or what it waits for is not a kind's."""
    if not NAME.match(kind.name):
        raise ValueError(f"kind name {kind.name!r}: lower-case letters, digits and '_', at most 32")
    missing = [n for n in kind.needs if n not in _REGISTRY and n != kind.name]
    if missing or kind.name in kind.needs:
        raise ValueError(f"kind {kind.name!r} waits for {', '.join(missing) or kind.name}, which is not an "
                         f"earlier kind")
    if kind.paid and (kind.estimate is None or kind.reported is None or kind.request is None):
        raise ValueError(f"kind {kind.name!r} is paid: it needs estimate, reported and request")
    if not kind.paid and not kind.work:
        raise ValueError(f"kind {kind.name!r} is local work: it needs work (\"module:function\")")
    _REGISTRY[kind.name] = kind
    return kind


def load(modules: tuple[str, ...] = ()) -> None:
    """Register the built-in kinds, then each of `modules`' `KIND` (a deployment's own, KINDS_FROM)."""
    for name in BUILT_IN + tuple(m for m in modules if m not in BUILT_IN):
        kind = getattr(importlib.import_module(name), "KIND", None)
        if not isinstance(kind, Kind):
            raise ValueError(f"module {name} has no KIND (a pipeline.core.kinds.Kind)")
        if _REGISTRY.get(kind.name) is not kind:
            register(kind)


def get(name: str) -> Kind:
    if not _REGISTRY:
        load()
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"no kind {name!r}; the kinds are {', '.join(names())}") from None


def every() -> tuple[Kind, ...]:
    """Every registered kind, each after the kinds it waits for (the order a version is planned in)."""
    if not _REGISTRY:
        load()
    ordered: list[Kind] = []
    # the bundle-like kinds (completing the version) go last: they wait for whatever else there is
    for kind in sorted(_REGISTRY.values(), key=lambda k: k.completes_version):
        _place(kind, ordered)
    return tuple(ordered)


def _place(kind: Kind, ordered: list[Kind]) -> None:
    if kind in ordered:
        return
    for need in kind.needs:
        _place(_REGISTRY[need], ordered)
    ordered.append(kind)


def names() -> tuple[str, ...]:
    return tuple(k.name for k in every())


def paid() -> tuple[Kind, ...]:
    return tuple(k for k in every() if k.paid)


def paid_names() -> tuple[str, ...]:
    return tuple(k.name for k in paid())


def media() -> tuple[Kind, ...]:
    """The kinds made per block: a block's media, shown and delivered with it."""
    return tuple(k for k in every() if k.per_block)

