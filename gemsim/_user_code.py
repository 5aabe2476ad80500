"""Code a scenario names by import path (``"module:attribute"``): finding it, hashing it,
importing it. Models (`gemsim.problems`) and rules (`gemsim.config`) both come this way.

Locating a module reads no code (``importlib.machinery.PathFinder`` only looks at files), so
a scenario can record the module file's sha256 without running the user's code. A module is
imported under its own name with its folder first on ``sys.path`` (so its imports of sibling
files work), in every process that needs it; importing a file whose sha256 no longer matches
the recorded one is an error, so a run never uses other code than its identity records.
Errors are raised as the caller's `UserError` subclass, naming what failed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

from gemsim._checks import UserError

__all__ = ["bind_kwargs", "file_sha256", "import_target", "locate_module", "module_digest"]

_STAMP = "__gemsim_sha256__"
"""Attribute set on a module gemsim imported: the sha256 of the file it was executed from."""


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 (hex) of a file's bytes.

    Memoised on (path, size, modification time): a sweep validates its scenario once per
    run, and hashing a large data file that often would cost more than the check is worth.
    """
    stat = Path(path).stat()
    return _sha256(str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=64)
def _sha256(path: str, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # part of the cache key only
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_module(name: str, folders: Sequence[str] = ()) -> Path | None:
    """The file a module would be imported from: first ``folders``, then ``sys.path``.

    A package's file is its ``__init__.py``; a namespace package or a built-in module has
    none (None is returned for those, and for a module that does not exist).
    """
    parts = name.split(".")
    for search in ([str(f) for f in folders], None):
        if search is not None and not search:
            continue
        spec = _top_level_spec(parts[0], search)
        for i in range(1, len(parts)):
            if spec is None or not spec.submodule_search_locations:
                spec = None
                break
            locations = list(spec.submodule_search_locations)
            spec = importlib.machinery.PathFinder.find_spec(".".join(parts[: i + 1]), locations)
        if spec is not None and spec.origin and Path(spec.origin).is_file():
            return Path(spec.origin)
    return None


def _top_level_spec(name: str, folders: list[str] | None):
    """A top-level module's spec: in ``folders``, or through every finder of
    ``sys.meta_path`` (an editable install's finder is one of them, not a path entry).
    No code runs: finding a top-level module imports nothing."""
    if folders is not None:
        return importlib.machinery.PathFinder.find_spec(name, folders)
    try:
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a broken entry in sys.modules, or an invalid name
        return None


def module_digest(
    name: str, folder: str | None, *, error: type[UserError] = UserError, source: str = ""
) -> tuple[Path, str]:
    """``(file, sha256)`` of the module ``name`` as seen from ``folder``.

    Raises:
      error: the module is not found (the message says where it was looked for).
    """
    origin = locate_module(name, [folder] if folder else [])
    if origin is None:
        where = f"in {folder} (the scenario's folder, or `path`) nor " if folder else ""
        raise error(
            source or f"import {name!r}",
            f"module {name!r} not found {where}on the Python path; check the name, or put "
            "the file beside the scenario",
        )
    return origin, file_sha256(origin)


def _import(name: str, origin: Path, sha256: str, error, source: str) -> ModuleType:
    loaded = sys.modules.get(name)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        same_file = file is not None and Path(file).resolve() == origin.resolve()
        if same_file and getattr(loaded, _STAMP, None) == sha256:
            return loaded
        if not same_file:
            # Another file under this name (two studies' `models.py` in one notebook): the
            # name now means this file; objects already made from the other keep working.
            del sys.modules[name]
            loaded = None
    try:
        module = importlib.reload(loaded) if loaded is not None else importlib.import_module(name)
    except Exception as exc:  # the user's module failed while executing
        raise error(source, f"importing {origin} raised {type(exc).__name__}: {exc}") from exc
    file = getattr(module, "__file__", None)
    if file is None or Path(file).resolve() != origin.resolve():
        raise error(source, f"importing {name!r} found {file}, not {origin}")
    setattr(module, _STAMP, sha256)
    return module


def _attribute(module: ModuleType, path: str, origin: Path, error, source: str):
    value = module
    for part in path.split("."):
        if not hasattr(value, part):
            public = ", ".join(sorted(n for n in vars(module) if not n.startswith("_")))
            raise error(
                source, f"{origin} has no attribute {path!r} (it defines: {public or 'nothing'})"
            )
        value = getattr(value, part)
    if not callable(value):
        raise error(source, f"{path!r} in {origin} is {type(value).__name__}, not a callable")
    return value


def import_target(
    target: str,
    folder: str | None,
    sha256: str | None,
    *,
    error: type[UserError] = UserError,
    source: str = "",
) -> Callable:
    """The callable ``"module:attribute"`` names, imported (``folder`` goes first on
    ``sys.path``, in every process that imports it). With ``sha256``, the module file must
    still have that digest."""
    module_name, _, attribute = target.partition(":")
    source = source or f"import {target!r}"
    origin, digest = module_digest(module_name, folder, error=error, source=source)
    if sha256 is not None and digest != sha256:
        raise error(
            source,
            f"{origin} changed since its sha256 was recorded ({sha256[:12]}..., now "
            f"{digest[:12]}...): load the scenario again so that the run's identity records it",
        )
    if folder:  # first on the path, so that the module and its sibling imports come from it
        if folder in sys.path:
            sys.path.remove(folder)
        sys.path.insert(0, folder)
    module = _import(module_name, origin, digest, error, source)
    return _attribute(module, attribute, origin, error, source)


def bind_kwargs(
    factory: Callable,
    kwargs: dict,
    *,
    error: type[UserError] = UserError,
    source: str = "",
    what: str = "",
) -> None:
    """Refuse keyword arguments ``factory``'s signature does not take (or required ones that
    are missing), naming them and the signature."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # not inspectable: the call itself will tell
    try:
        signature.bind(**kwargs)
    except TypeError as exc:
        raise error(source, f"kwargs {kwargs!r} do not fit {what}{signature}: {exc}") from None
