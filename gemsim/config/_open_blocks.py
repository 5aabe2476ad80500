"""Blocks that open the rule side: a rule by import path, optax transformations named by
their constructor, and the `local` rule (local steps of an inner optax optimizer, an outer
optax optimizer at the server).

An optax block is `{name: adamw, learning_rate: 1e-3, weight_decay: 0.01}`: any optax
constructor that returns a GradientTransformation, its arguments checked against its
signature when the scenario is loaded. A rule by import path is
`{rule: {import: "package.module:factory"}, <keyword arguments of the factory>}`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt, ValidationInfo, model_validator

from ._block import Block
from ._code_refs import IMPORT_PATTERN, check_kwargs, load, locate, optax_transformation

if TYPE_CHECKING:
    from gemsim import rules


class OptaxBlock(Block):
    """An optax transformation: its constructor's name and keyword arguments."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    name: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]*$")]

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @model_validator(mode="after")
    def _buildable(self):
        self.build()  # a bad name or argument is reported at the field
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
        if not isinstance(data, dict) or data.get("sha256") is not None:
            return data  # not a mapping (the field checks report it), or already resolved
        target = data.get("import", data.get("target"))
        if not isinstance(target, str) or not re.match(IMPORT_PATTERN, target):
            return data
        base = (info.context or {}).get("base_dir")
        folder, digest = locate(target, Path(base) if base else None)
        return {**data, "path": folder, "sha256": digest}

    def load(self):
        return load(self.target, self.path, self.sha256)


class ImportRuleBlock(Block):
    """A rule outside gemsim: `rule: {import: "module:factory"}` and the factory's keyword
    arguments beside it; the factory returns a `gemsim.rules.Rule`."""

    model_config = ConfigDict(extra="allow", frozen=True, allow_inf_nan=False)
    rule: ImportRef

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.model_extra or {})

    @property
    def window(self) -> int:
        return self.build().window

    @model_validator(mode="after")
    def _buildable(self):
        check_kwargs(self.rule.load(), self.kwargs, f"rule {self.rule.target}")
        self.build()
        return self

    def build(self) -> rules.Rule:
        from gemsim import rules

        factory = self.rule.load()
        try:
            rule = factory(**self.kwargs)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{self.rule.target}({self.kwargs}) failed: {exc}") from None
        if not isinstance(rule, rules.Rule):
            raise ValueError(
                f"{self.rule.target} returned {type(rule).__name__}, not a gemsim.rules.Rule"
            )
        return rule


def _default_inner() -> OptaxBlock:
    return OptaxBlock(name="adamw", learning_rate=1e-3)


def _default_outer() -> OptaxBlock:
    return OptaxBlock(name="sgd", learning_rate=0.7, momentum=0.9, nesterov=True)


class LocalBlock(Block):
    """Local SGD / DiLoCo-style: `window` steps of `inner` on the worker, `outer` at the
    server on the pseudo-gradient. `lr`, when given, is the inner optimizer's learning rate
    (a shorthand for sweeps)."""

    rule: Literal["local"]
    window: PositiveInt = 8
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
        if inner is None:
            inner = {"name": _default_inner().name}
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
        return rules.local(inner=inner.build(), outer=self.outer.build(), window=self.window)
