"""Finding and importing a model factory named by import path (``"module:factory"``).

Locating a module reads no code (``importlib.machinery.PathFinder`` only looks at files), so
the scenario layer can record the module file's sha256 without importing JAX or running the
user's code; importing it happens when the problem is built. No JAX here.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from gemsim._checks import UserError

from ._digests import file_sha256
from ._specs import Imported

__all__ = ["ModelError", "import_factory", "locate_module", "module_digest"]

_STAMP = "__gemsim_sha256__"
"""Attribute set on a module gemsim imported: the sha256 of the file it was executed from."""


class ModelError(UserError):
    """A model named by import path cannot be found, imported, called or used."""


def locate_module(name: str, folders: Sequence[str] = ()) -> Path | None:
    """The file a module would be imported from: first ``folders``, then ``sys.path``.

    A package's file is its ``__init__.py``; a namespace package or a built-in module has
    none (None is returned for those, and for a module that does not exist).
    """
    parts = name.split(".")
    for search in ([str(f) for f in folders], None):
        if search is not None and not search:
            continue
        spec = importlib.machinery.PathFinder.find_spec(parts[0], search)
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                spec = None
                break
            locations = list(spec.submodule_search_locations)
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations)
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            return Path(spec.origin)
    return None


def module_digest(name: str, folder: str | None) -> tuple[Path, str]:
    """``(file, sha256)`` of the module ``name`` as seen from ``folder``.

    Raises:
      ModelError: the module is not found (the message says where it was looked for).
    """
    origin = locate_module(name, [folder] if folder else [])
    if origin is None:
        where = f"in {folder} (the scenario's folder, or `path`) nor " if folder else ""
        raise ModelError(
            f"model import {name!r}",
            f"module {name!r} not found {where}on the Python path; check the name, or put "
            "the file beside the scenario",
        )
    return origin, file_sha256(origin)


def _import(name: str, origin: Path, sha256: str, source: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        if file is None or Path(file).resolve() != origin.resolve():
            raise ModelError(
                source,
                f"a different module named {name!r} is already imported (from {file}); "
                f"rename {origin}",
            )
        if getattr(loaded, _STAMP, None) == sha256:
            return loaded
    try:
        module = importlib.reload(loaded) if loaded is not None else importlib.import_module(name)
    except Exception as exc:  # the user's module failed while executing
        raise ModelError(source, f"importing {origin} raised {type(exc).__name__}: {exc}") from exc
    setattr(module, _STAMP, sha256)
    return module


def _attribute(module: ModuleType, path: str, origin: Path, source: str):
    value = module
    for part in path.split("."):
        if not hasattr(value, part):
            public = ", ".join(sorted(n for n in vars(module) if not n.startswith("_")))
            raise ModelError(
                source, f"{origin} has no attribute {path!r} (it defines: {public or 'nothing'})"
            )
        value = getattr(value, part)
    if not callable(value):
        raise ModelError(source, f"{path!r} in {origin} is {type(value).__name__}, not a callable")
    return value


def import_factory(spec: Imported) -> Callable:
    """The factory ``spec`` names, imported (the folder goes first on ``sys.path``, so that
    the module's own imports of sibling files work, in every process that builds it)."""
    source = f"model import {spec.target!r}"
    origin, digest = module_digest(spec.module, spec.path)
    if spec.sha256 is not None and digest != spec.sha256:
        raise ModelError(
            source,
            f"{origin} changed since its sha256 was recorded ({spec.sha256[:12]}..., now "
            f"{digest[:12]}...): load the scenario again so that the run's identity records it",
        )
    if spec.path and spec.path not in sys.path:
        sys.path.insert(0, spec.path)
    module = _import(spec.module, origin, digest, source)
    return _attribute(module, spec.factory, origin, source)


def call_factory(factory: Callable, spec: Imported):
    """``factory(**spec.kwargs)``; wrong keyword arguments are told apart from errors raised
    inside the factory, and both become a :class:`ModelError`."""
    source = f"model import {spec.target!r}"
    kwargs = dict(spec.kwargs)
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        signature = None
    if signature is not None:
        try:
            signature.bind(**kwargs)
        except TypeError as exc:
            raise ModelError(
                source, f"kwargs {kwargs!r} do not fit {spec.factory}{signature}: {exc}"
            ) from None
    try:
        return factory(**kwargs)
    except Exception as exc:  # the user's factory failed
        raise ModelError(source, f"{spec.describe()} raised {type(exc).__name__}: {exc}") from exc
