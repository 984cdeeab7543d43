"""One exception root: every error the pipeline and the providers raise on purpose is a `PipelineError`, so a
caller that must stop on any of ours catches one class, and no error is both of two trees."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pipeline
import providers
from pipeline.core import errors
from pipeline.core.errors import PipelineError

# Raised and caught inside the HTTP classification, never out of it (each becomes a ProviderError there), and a
# URL check that settings.py turns into its ConfigError.
INSIDE = {"providers.http_classify.BadBody", "providers.http_classify.HttpStatus", "providers.urls.UnsafeBaseURL"}


def our_exceptions() -> dict[str, type]:
    found = {}
    for package in (pipeline, providers):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            module = importlib.import_module(info.name)
            for name, value in vars(module).items():
                if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                    found[f"{info.name}.{name}"] = value
    return found


def test_every_error_of_ours_has_the_one_root():
    found = our_exceptions()
    assert len(found) >= 20 and "providers.errors.ProviderError" in found
    assert sorted(name for name, cls in found.items() if not issubclass(cls, PipelineError)) == sorted(INSIDE)


def test_no_error_joins_two_trees_and_the_waits_are_busy():
    """A class names at most one of our errors as its base (a builtin such as ValueError may be the other): no
    error is made of two trees by multiple inheritance."""
    for name, cls in our_exceptions().items():
        ours = [base for base in cls.__bases__ if issubclass(base, PipelineError)]
        assert len(ours) <= 1, (name, cls.__bases__)
    for wait in (errors.WaitingForInput, errors.SlotsBusy, errors.BudgetReached):
        assert wait.__bases__ == (errors.Busy,)
