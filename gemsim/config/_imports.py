"""Code a scenario names by import path (`{import: "module:factory"}`): resolving it, and the
optax transformations a scenario names by constructor (`{name: adamw, learning_rate: 1e-3}`).

A module is looked up first as a file next to the scenario (`module.py` or a package folder,
dotted names as sub-folders), then in the environment. The resolved block records the file's
absolute path and sha256: the path lets spawned worker processes import the same file, and
the sha256 enters the run's identity, so a run whose code changed is not taken for finished.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

IMPORT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"


def _local_file(module: str, base_dir: Path | None) -> Path | None:
    if base_dir is None:
        return None
    parts = module.split(".")
    for candidate in (
        base_dir.joinpath(*parts).with_suffix(".py"),
        base_dir.joinpath(*parts, "__init__.py"),
    ):
        if candidate.is_file():
            return candidate.resolve()
    return None


def load_module(module: str, *, base_dir: Path | None = None, file: str | None = None):
    """The module named ``module``: from ``file`` when given (a resolved block), else a file
    next to the scenario, else the environment. Raises ValueError saying what failed."""
    path = Path(file) if file else _local_file(module, base_dir)
    if path is None:
        try:
            return importlib.import_module(module)
        except ImportError as exc:
            where = f" nor next to the scenario in {base_dir}" if base_dir else ""
            raise ValueError(
                f"module {module!r} was found neither in the environment{where} ({exc})"
            ) from None
    key = f"gemsim_user.{module}.{hashlib.sha256(str(path).encode()).hexdigest()[:12]}"
    if key in sys.modules:
        return sys.modules[key]
    return _exec_file(key, module, path)


def _exec_file(key: str, module: str, path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(key, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import module {module!r} from {path}")
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[key] = loaded
    try:
        spec.loader.exec_module(loaded)
    except Exception as exc:  # the user's module failed at import: say where, not a traceback
        del sys.modules[key]
        raise ValueError(f"importing {path} failed: {type(exc).__name__}: {exc}") from None
    return loaded


def resolve_import(ref: str, base_dir: Path | None) -> tuple[Any, str, str]:
    """``(object, file, sha256)`` of ``"module:attribute"``."""
    module_name, _, attribute = ref.partition(":")
    module = load_module(module_name, base_dir=base_dir)
    if not hasattr(module, attribute):
        raise ValueError(f"module {module_name!r} has no attribute {attribute!r}")
    file = getattr(module, "__file__", None)
    if file is None:
        raise ValueError(f"module {module_name!r} has no source file to record")
    digest = hashlib.sha256(Path(file).read_bytes()).hexdigest()
    return getattr(module, attribute), str(Path(file).resolve()), digest


def check_kwargs(factory: Any, kwargs: dict[str, Any], what: str) -> None:
    """Refuse keyword arguments ``factory`` does not take, naming them and the allowed ones."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return  # a callable without an inspectable signature: its own call will tell
    params = signature.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    allowed = [
        name
        for name, p in params.items()
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        raise ValueError(
            f"{what} takes no argument {', '.join(map(repr, unknown))}; allowed: "
            f"{', '.join(allowed) or 'none'}"
        )
    required = [
        name
        for name, p in params.items()
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    missing = [name for name in required if name not in kwargs]
    if missing:
        raise ValueError(f"{what} needs {', '.join(map(repr, missing))}")


def optax_transformation(name: str, kwargs: dict[str, Any]):
    """``optax.<name>(**kwargs)``, checked: an optax constructor returning a
    GradientTransformation, called with arguments its signature takes."""
    import optax

    factory = getattr(optax, name, None)
    if factory is None or not callable(factory) or name.startswith("_"):
        raise ValueError(f"optax has no transformation {name!r} (e.g. sgd, adam, adamw)")
    check_kwargs(factory, kwargs, f"optax.{name}")
    try:
        tx = factory(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"optax.{name}({kwargs}) failed: {exc}") from None
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"optax.{name} does not return a GradientTransformation")
    return tx
