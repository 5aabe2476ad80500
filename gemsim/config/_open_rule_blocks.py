"""Blocks that open the rule side: a rule by import path, optax transformations named by
their constructor, and the `local` rule (local steps of an inner optax optimizer, an outer
optax optimizer at the server).

An optax block is `{name: adamw, learning_rate: 1e-3, weight_decay: 0.01}`: any optax
constructor that returns a GradientTransformation. When the scenario is loaded its arguments
are checked against the constructor's signature, and its values by building it and tracing
one update on a two-parameter dummy tree (`jax.eval_shape`: nothing is compiled or run). A
rule by import path is `{rule: {import: "package.module:factory"}, <keyword arguments of the
factory>}`; the factory is called when the scenario is loaded.

Every error is raised at the field it is about (`optimizer.inner.learning_rate`,
`optimizer.lr`, `optimizer.rule`), with the value and what is allowed.
"""

from __future__ import annotations

import inspect
import linecache
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    PositiveFloat,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from gemsim._checks import is_real

from ._block import Block
from ._code_refs import (
    IMPORT_PATTERN,
    load,
    locate,
    optax_transformation,
    transformation_factory,
    transformation_name,
    with_schedules,
)
from ._windows import DynamicWindow, Window, static_window

if TYPE_CHECKING:
    from gemsim import rules

Problem = tuple[tuple[str, ...], str, Any]
"""An error at a field below the block: (location, message, the value)."""


def _raise(problems: list[Problem]) -> None:
    """Report problems at their fields (pydantic prefixes the block's own location)."""
    if problems:
        details = [
            InitErrorDetails(
                type=PydanticCustomError("argument", "{message}", {"message": message}),
                loc=loc,
                input=value,
            )
            for loc, message, value in problems
        ]
        raise ValidationError.from_exception_data("arguments", details)


def _signature_problems(factory: Any, kwargs: dict[str, Any], what: str) -> list[Problem]:
    """Arguments ``factory`` does not take, and required ones not given, each at its name."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return []  # not inspectable: calling it will tell
    named = {n: p for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    problems: list[Problem] = []
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        takes = ", ".join(named) or "no arguments"
        for name in kwargs.keys() - named.keys():
            problems.append(
                ((name,), f"unknown argument {name!r} of {what}, which takes {takes}", kwargs[name])
            )
    for name, p in named.items():
        if p.default is p.empty and name not in kwargs:
            problems.append(((name,), f"required argument {name!r} of {what} is missing", kwargs))
    return problems


# --- optax ----------------------------------------------------------------------------------


def _optax_factory(name: str):
    return transformation_factory(name)


def _optax_step_error(name: str, kwargs: dict[str, Any]) -> str | None:
    """What goes wrong building ``optax.<name>(**kwargs)`` and tracing one update on a dummy
    tree (shapes only, nothing compiled), or None."""
    import jax
    import jax.numpy as jnp
    import optax

    try:
        tx = _optax_factory(name)(**with_schedules(kwargs))
        if not isinstance(tx, optax.GradientTransformation):
            return f"{transformation_name(name)} does not return a GradientTransformation"
        tree = {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}
        # optax's code as the engine runs it, whatever numerics a caller made strict
        with jax.numpy_dtype_promotion("standard"), jax.numpy_rank_promotion("allow"):
            jax.eval_shape(lambda p: tx.update(p, tx.init(p), p), tree)
    except Exception as exc:  # any failure of optax's code on these values is the user's
        return f"{type(exc).__name__}: {exc}"
    return None


def _allowed(param: inspect.Parameter, value: Any = None) -> str:
    """What a value of an optax argument may be, from its default and annotation."""
    if isinstance(value, dict) and "schedule" in value:
        return "an optax schedule it can build ({schedule: NAME, <its arguments>})"
    if str(param.annotation) in ("int", "<class 'int'>"):
        return "an integer"
    default = param.default
    if isinstance(default, bool):
        return "true or false"
    if is_real(default):
        return f"a finite number (default {default})"
    if "float" in str(param.annotation) or "int" in str(param.annotation):
        return "a finite number" + (" or null" if default is None else "")
    return "a value its documentation allows"


def _optax_value_problems(name: str, kwargs: dict[str, Any]) -> list[Problem]:
    """Values of known arguments that optax cannot use, each at its name.

    Types are checked first (a flag must be a bool, a number finite); then one update is
    traced with all the values, and, if that fails, with each value alone (the others at
    their defaults, a required number at 1.0), so that the error names the argument at
    fault."""
    params = _parameters(_optax_factory(name), kwargs)
    what = transformation_name(name)
    problems: list[Problem] = []
    for key, value in kwargs.items():
        param = params[key]
        wrong_flag = isinstance(param.default, bool) and not isinstance(value, bool)
        if wrong_flag or (is_real(value) and not math.isfinite(value)):
            problems.append(((key,), f"{what} needs {_allowed(param)} here", value))
    error = None if problems else _optax_step_error(name, kwargs)
    if error is None:
        return problems
    stand_ins = {k: _stand_in(p) for k, p in params.items() if p.default is p.empty and k in kwargs}
    if _optax_step_error(name, stand_ins) is None:
        for key, value in kwargs.items():
            alone = _optax_step_error(name, {**stand_ins, key: value})
            if alone is not None:
                allowed = _allowed(params[key], value)
                message = f"{what} needs {allowed} here; an update with it failed: {alone}"
                problems.append(((key,), message, value))
    if not problems:  # only the combination fails
        problems.append(((), f"{what}({_call_text(kwargs)}) fails: {error}", kwargs))
    return problems


def _stand_in(param: inspect.Parameter) -> float | int:
    """A harmless value for a required number: 1 for an integer, else 1.0."""
    return 1 if str(param.annotation) in ("int", "<class 'int'>") else 1.0


def _parameters(factory: Any, kwargs: dict[str, Any]) -> dict[str, inspect.Parameter]:
    """``factory``'s parameters, with a bare one for each argument its ``**kwargs`` takes."""
    try:
        params = dict(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        params = {}
    bare = {k: inspect.Parameter(k, inspect.Parameter.KEYWORD_ONLY) for k in kwargs}
    return {**bare, **params}


def _call_text(kwargs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in kwargs.items())


class OptaxBlock(Block):
    """An optax transformation: its constructor's name and keyword arguments."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")]

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _buildable(self):
        if _optax_factory(self.name) is None:
            message = (
                f"optax has no transformation {self.name!r} (e.g. sgd, adam, adamw; or "
                "gemsim's delayed_nesterov, buffered_nesterov)"
            )
            _raise([(("name",), message, self.name)])
        factory, what = _optax_factory(self.name), transformation_name(self.name)
        _raise(_signature_problems(factory, self.kwargs, what))
        _raise(_optax_value_problems(self.name, self.kwargs))
        return self

    def build(self):
        return optax_transformation(self.name, self.kwargs)


class ImportRef(Block):
    """Where a rule's factory lives: `import` as given; `path` (the scenario's folder, when the
    module is there) and `sha256` (of the module's file) are filled in when the scenario is
    loaded: worker processes import it from there, and the hash is part of the run's id."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    target: Annotated[str, Field(alias="import", pattern=IMPORT_PATTERN)]
    path: str | None = None
    sha256: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _resolve(cls, data: Any, info: ValidationInfo) -> Any:
        if isinstance(data, dict):
            _raise(cls._unknown_fields(data))
        if not isinstance(data, dict) or data.get("sha256") is not None:
            return data  # not a mapping (the field checks report it), or already resolved
        target = data.get("import", data.get("target"))
        if not isinstance(target, str) or not re.match(IMPORT_PATTERN, target):
            return data
        base = (info.context or {}).get("base_dir")
        folder, digest = locate(target, Path(base) if base else None)
        return {**data, "path": folder, "sha256": digest}

    @classmethod
    def _unknown_fields(cls, data: dict) -> list[Problem]:
        """Fields named as in the file (`import`, not the attribute's name)."""
        names = {f.alias or n for n, f in cls.model_fields.items()}
        allowed = f"allowed here: {', '.join(sorted(names))}"
        valid = names | cls.model_fields.keys()
        return [((k,), f"unknown field; {allowed}", data[k]) for k in data if k not in valid]

    def load(self):
        return load(self.target, self.path, self.sha256)


class ImportRuleBlock(Block):
    """A rule outside gemsim: `rule: {import: "module:factory"}` and the factory's keyword
    arguments beside it; the factory returns a `gemsim.rules.Rule`."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    rule: ImportRef

    @property
    def kwargs(self) -> dict[str, Any]:
        """The factory's arguments; a `window: {dynamic: H}` is given to it as H (the
        fastest worker's count), the timing model giving each worker its own."""
        kwargs = dict(self.model_extra or {})
        if isinstance(kwargs.get("window"), dict):
            kwargs["window"] = DynamicWindow.model_validate(kwargs["window"]).dynamic
        return kwargs

    @property
    def window(self) -> int | DynamicWindow:
        raw = (self.model_extra or {}).get("window")
        if isinstance(raw, dict):
            return DynamicWindow.model_validate(raw)
        return self.build().window

    @model_validator(mode="after")
    def _buildable(self):
        raw = (self.model_extra or {}).get("window")
        if isinstance(raw, dict):
            try:
                DynamicWindow.model_validate(raw)
            except ValidationError as exc:
                message = f"a mapping window is {{dynamic: H}}, H an integer >= 1 ({exc})"
                _raise([(("window",), message, raw)])
        try:
            factory = self.rule.load()
        except ValueError as exc:
            _raise([(("rule",), str(exc), self.rule.target)])
        _raise(_signature_problems(factory, self.kwargs, self.rule.target))
        try:
            rule = factory(**self.kwargs)
        except Exception as exc:  # the user's factory refused its arguments
            _raise([_factory_problem(exc, factory, self.rule.target, self.kwargs)])
        _check_is_rule(rule, self.rule.target)
        return self

    def build(self) -> rules.Rule:
        return self.rule.load()(**self.kwargs)  # checked when the scenario was loaded


def _check_is_rule(rule: Any, target: str) -> None:
    from gemsim import rules

    if not isinstance(rule, rules.Rule):
        message = f"{target} returned {type(rule).__name__}, not a gemsim.rules.Rule"
        _raise([(("rule",), message, target)])


def _factory_problem(exc: Exception, factory: Any, target: str, kwargs: dict) -> Problem:
    """The factory's error, at the argument its failing line names (`optimizer.lr`) when it
    names exactly one, else at the block with every argument shown."""
    name = _blamed_argument(exc, factory, kwargs)
    error = f"{type(exc).__name__}: {exc}"
    if name is not None:
        return (name,), f"{target} refused it: {error}", kwargs[name]
    return (), f"{target}({_call_text(kwargs)}) failed: {error}", kwargs


def _blamed_argument(exc: Exception, factory: Any, kwargs: dict) -> str | None:
    """The one keyword argument named on the line of ``factory`` the error came through."""
    code = getattr(factory, "__code__", None)
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code is not code:
        tb = tb.tb_next
    if tb is None:
        return None
    line = linecache.getline(code.co_filename, tb.tb_lineno)
    named = set(re.findall(r"[A-Za-z_]\w*", line)) & kwargs.keys()
    return named.pop() if len(named) == 1 else None


def _default_inner() -> OptaxBlock:
    # DiLoCo's inner optimizer (weight decay 0.1, its Table 5), as `rules.local` builds it.
    return OptaxBlock(name="adamw", learning_rate=1e-3, weight_decay=0.1)


def _default_outer() -> OptaxBlock:
    return OptaxBlock(name="sgd", learning_rate=0.7, momentum=0.9, nesterov=True)


class LocalBlock(Block):
    """Local SGD / DiLoCo-style: `window` steps of `inner` on the worker, `outer` at the
    server on the pseudo-gradient. `lr`, when given, is the inner optimizer's learning rate
    (a shorthand for sweeps)."""

    rule: Literal["local"]
    window: Window = 8
    lr: PositiveFloat | None = None
    inner: OptaxBlock = Field(default_factory=_default_inner)
    outer: OptaxBlock = Field(default_factory=_default_outer)

    @model_validator(mode="before")
    @classmethod
    def _lr_into_inner(cls, data):
        """`lr` is written into the inner optimizer (the default one when `inner` is not
        given), so that the resolved config, which holds both, validates again."""
        if not isinstance(data, dict) or data.get("lr") is None:
            return data
        inner = data.get("inner")
        if inner is None:  # the default inner optimizer, at the given rate
            default = _default_inner()
            inner = {"name": default.name, **default.kwargs}
            inner.pop("learning_rate")
        if isinstance(inner, dict) and "learning_rate" not in inner:
            return {**data, "inner": {**inner, "learning_rate": data["lr"]}}
        return data

    @model_validator(mode="after")
    def _lr_or_inner(self):
        rate = self.inner.kwargs.get("learning_rate")
        if self.lr is not None and rate is not None and rate != self.lr:
            raise ValueError(
                f"give the inner learning rate once: `lr` ({self.lr}) or "
                f"`inner.learning_rate` ({rate})"
            )
        return self

    def build(self) -> rules.Rule:
        from gemsim import rules

        inner = self.inner
        if self.lr is not None:
            inner = OptaxBlock(name=inner.name, **{**inner.kwargs, "learning_rate": self.lr})
        return rules.local(
            inner=inner.build(), outer=self.outer.build(), window=static_window(self.window)
        )
