"""Model factories named by import path: the shared import machinery (`gemsim._user_code`)
with the problem stage's error type."""

from __future__ import annotations

from collections.abc import Callable

from gemsim._checks import UserError
from gemsim._user_code import bind_kwargs, import_target

from ._specs import Imported

__all__ = ["ModelError", "call_factory", "import_factory"]


class ModelError(UserError):
    """A model named by import path cannot be found, imported, called or used."""


def import_factory(spec: Imported) -> Callable:
    """The factory ``spec`` names, imported (its folder first on ``sys.path``)."""
    source = f"model import {spec.target!r}"
    return import_target(spec.target, spec.path, spec.sha256, error=ModelError, source=source)


def call_factory(factory: Callable, spec: Imported):
    """``factory(**spec.kwargs)``; wrong keyword arguments are told apart from errors raised
    inside the factory, and both become a :class:`ModelError`."""
    source = f"model import {spec.target!r}"
    kwargs = dict(spec.kwargs)
    bind_kwargs(factory, kwargs, error=ModelError, source=source, what=spec.factory)
    try:
        return factory(**kwargs)
    except Exception as exc:  # the user's factory failed
        raise ModelError(source, f"{spec.describe()} raised {type(exc).__name__}: {exc}") from exc
