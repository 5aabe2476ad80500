"""Code a scenario names: a rule factory by import path (`{import: "module:factory"}`), and an
optax transformation by its constructor (`{name: adamw, learning_rate: 1e-3}`).

Import paths go through `gemsim._user_code` (the same machinery as models): the module is
looked up beside the scenario first, then in the environment; its file's sha256 is recorded
in the resolved block, so a run whose code changed gets a new identity, and every process
that imports it checks the file still has that digest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gemsim._user_code import bind_kwargs, import_target, module_digest

IMPORT_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*$"

LOCATING_FIELDS = frozenset({"import", "target", "path", "data_dir", "file"})
"""Fields of a block that say which file it reads (a module, an npz file, a data folder, an
availability trace or a file of samples)."""

DERIVED_FIELDS = ("sha256", "file")
"""What a resolved block records about that file. A resolved block validated again must still
match its `sha256`; one whose locating field is set anew names another file, whose own digest
is recorded instead (`forget_derived`)."""


def forget_derived(block: dict[str, Any], field: str) -> dict[str, Any]:
    """``block`` (a mapping being edited by a sweep point or a ``--set``) without what it
    recorded about its file, when ``field`` changes which file that is."""
    if field not in LOCATING_FIELDS:
        return block
    return {k: v for k, v in block.items() if k not in DERIVED_FIELDS}


def locate(target: str, base_dir: Path | None) -> tuple[str | None, str]:
    """``(folder, sha256)`` of the module ``target`` names: the scenario's folder when the
    module is there, else None (found in the environment). Raises ValueError if not found."""
    module = target.partition(":")[0]
    folder = str(Path(base_dir).resolve()) if base_dir is not None else None
    try:
        origin, digest = module_digest(module, folder)
    except ValueError as exc:
        raise ValueError(exc.problems[-1] if hasattr(exc, "problems") else str(exc)) from None
    inside = folder is not None and Path(origin).resolve().is_relative_to(folder)
    return (folder if inside else None), digest


def load(target: str, folder: str | None, sha256: str | None):
    """The object ``target`` names (ValueError saying what failed)."""
    try:
        return import_target(target, folder, sha256)
    except ValueError as exc:
        raise ValueError(exc.problems[-1] if hasattr(exc, "problems") else str(exc)) from None


def check_kwargs(factory: Any, kwargs: dict[str, Any], what: str) -> None:
    """Refuse keyword arguments ``factory`` does not take (or missing required ones)."""
    try:
        bind_kwargs(factory, kwargs, what=what)
    except ValueError as exc:
        raise ValueError(exc.problems[-1] if hasattr(exc, "problems") else str(exc)) from None


def transformation_factory(name: str):
    """The constructor a transformation's name means: gemsim's own outer optimizers
    (`gemsim.rules.OUTER_OPTIMIZERS`: delayed_nesterov, buffered_nesterov), else optax's;
    None for neither."""
    import optax

    from gemsim import rules

    if name in rules.OUTER_OPTIMIZERS:
        return rules.OUTER_OPTIMIZERS[name]
    factory = getattr(optax, name, None)
    return factory if callable(factory) and not name.startswith("_") else None


def transformation_name(name: str) -> str:
    """How messages name a transformation: ``optax.adamw``, ``gemsim.rules.delayed_nesterov``."""
    from gemsim import rules

    return f"gemsim.rules.{name}" if name in rules.OUTER_OPTIMIZERS else f"optax.{name}"


def with_schedules(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments with each ``{schedule: NAME, ...}`` value made the optax schedule
    ``optax.schedules.NAME(...)`` (a learning rate that follows the optimizer's own step
    count: a worker's inner steps, the server's outer steps)."""
    import optax

    out = dict(kwargs)
    for key, value in kwargs.items():
        if isinstance(value, dict) and "schedule" in value:
            args = {k: v for k, v in value.items() if k != "schedule"}
            name = value["schedule"]
            factory = getattr(optax.schedules, str(name), None)
            if factory is None or str(name).startswith("_") or not callable(factory):
                raise ValueError(
                    f"{key}: optax has no schedule {name!r} (e.g. warmup_cosine_decay_schedule, "
                    "cosine_decay_schedule, linear_schedule)"
                )
            check_kwargs(factory, args, f"optax.schedules.{name}")
            out[key] = factory(**args)
    return out


def optax_transformation(name: str, kwargs: dict[str, Any]):
    """``optax.<name>(**kwargs)`` (or one of gemsim's outer optimizers), checked: a
    constructor returning a GradientTransformation, called with arguments its signature
    takes; ``{schedule: ...}`` values become optax schedules."""
    import optax

    factory = transformation_factory(name)
    what = transformation_name(name)
    if factory is None:
        raise ValueError(f"optax has no transformation {name!r} (e.g. sgd, adam, adamw)")
    check_kwargs(factory, kwargs, what)
    try:
        tx = factory(**with_schedules(kwargs))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what}({kwargs}) failed: {exc}") from None
    if not isinstance(tx, optax.GradientTransformation):
        raise ValueError(f"{what} does not return a GradientTransformation")
    return tx
