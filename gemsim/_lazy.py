"""Lazy exports for package roots (PEP 562): a name is imported from its module on first use.

A package root that imports its modules eagerly pulls their dependencies into every import of
the package (``import gemsim`` would load JAX, pandas and matplotlib); with lazy exports each
stage loads only what the caller touches, which is what the layering tests check.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence


def lazy_exports(
    package: str,
    table: Mapping[str, Sequence[str]],
    deprecated: Mapping[str, str] | None = None,
) -> tuple[Callable[[str], object], Callable[[], list[str]], list[str]]:
    """``(__getattr__, __dir__, __all__)`` for ``package``.

    Args:
        package: the package's ``__name__``.
        table: module (relative, e.g. ``"._problem"`` or ``".models._specs"``, or absolute) -> the
            names it exports.
        deprecated: old name -> the exported name that replaces it, or ``"module:name"``
            when it moved to another package; the old one still works for a release, with a
            DeprecationWarning, and is not in ``__all__``.
    """
    where = {name: module for module, names in table.items() for name in names}
    renamed = dict(deprecated or {})

    def __getattr__(name: str) -> object:
        if name in renamed:
            module, _, new = renamed[name].rpartition(":")
            warnings.warn(
                f"{package}.{name} is deprecated; use {module or package}.{new}",
                DeprecationWarning,
                stacklevel=2,
            )
            return getattr(importlib.import_module(module), new) if module else __getattr__(new)
        module = where.get(name)
        if module is None:
            return _submodule(package, name)
        value = getattr(importlib.import_module(module, package), name)
        setattr(sys.modules[package], name, value)  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted({*where, *vars(sys.modules[package])})

    return __getattr__, __dir__, sorted(where)


def _submodule(package: str, name: str) -> object:
    """``package.name`` when it is a subpackage or module (``gemsim.config`` after ``import
    gemsim``), else the AttributeError Python would raise."""
    if not name.startswith("__"):
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"{package}.{name}":
                raise
    raise AttributeError(f"module {package!r} has no attribute {name!r}")
