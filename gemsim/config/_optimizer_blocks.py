"""The blocks of gemsim's built-in rules; each builds the rule's pure functions.

`gemsim.rules` (JAX) is imported by `build()` only, so that loading a scenario stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from ._block import Block

if TYPE_CHECKING:
    from gemsim import rules

Momentum = Annotated[float, Field(ge=0, lt=1)]


class GemBlock(Block):
    rule: Literal["gem"]
    lr: PositiveFloat
    momentum: Momentum = 0.9
    kappa: PositiveFloat = 1.0
    pi_max: PositiveFloat = 5.0
    eps: PositiveFloat = 1e-12
    eps_placement: Literal["outside", "inside"] = "outside"
    gradient_at: Literal["post_commit", "pulled"] = "post_commit"
    diagnostics_every: PositiveInt = 1  # full diagnostics on every k-th commit (NaN between)

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.gem(
            lr=self.lr,
            momentum=self.momentum,
            kappa=self.kappa,
            pi_max=self.pi_max,
            eps=self.eps,
            eps_placement=rules.EpsPlacement[self.eps_placement.upper()],
            gradient_at=rules.GradientAt[self.gradient_at.upper()],
            diagnostics_every=self.diagnostics_every,
        )


class DownpourBlock(Block):
    rule: Literal["downpour"]
    lr: PositiveFloat
    window: PositiveInt = 1
    local_momentum: Momentum = 0.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.downpour(lr=self.lr, window=self.window, local_momentum=self.local_momentum)


class InverseWeight(Block):
    kind: Literal["inverse"]

    def build(self):
        from gemsim import rules

        return rules.Inverse()


class PolynomialWeight(Block):
    kind: Literal["polynomial"]
    a: PositiveFloat

    def build(self):
        from gemsim import rules

        return rules.Polynomial(a=self.a)


class HingeWeight(Block):
    kind: Literal["hinge"]
    a: PositiveFloat
    b: Annotated[float, Field(ge=0)]

    def build(self):
        from gemsim import rules

        return rules.Hinge(a=self.a, b=self.b)


class ConstantWeightBlock(Block):
    kind: Literal["constant"]

    def build(self):
        from gemsim import rules

        return rules.ConstantWeight()


Weight = Annotated[
    InverseWeight | PolynomialWeight | HingeWeight | ConstantWeightBlock,
    Field(discriminator="kind"),
]


class StalenessBlock(Block):
    rule: Literal["staleness"]
    lr: PositiveFloat
    weight: Weight = InverseWeight(kind="inverse")

    @model_validator(mode="before")
    @classmethod
    def _weight_shorthand(cls, data):
        """`weight: inverse` is shorthand for `weight: {kind: inverse}`."""
        if isinstance(data, dict) and isinstance(data.get("weight"), str):
            return {**data, "weight": {"kind": data["weight"]}}
        return data

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.staleness(lr=self.lr, weight=self.weight.build())


class SoftsyncBlock(Block):
    """`c` gradients per server update: n-softsync with λ workers is c = ⌊λ/n⌋ (c = 1 is
    λ-softsync, an update per gradient; c = λ is 1-softsync)."""

    rule: Literal["softsync"]
    lr: PositiveFloat
    c: PositiveInt = 1
    momentum: Momentum = 0.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.softsync(lr=self.lr, c=self.c, momentum=self.momentum)


class AgnBlock(Block):
    rule: Literal["agn"]
    lr: PositiveFloat
    window: PositiveInt = 1

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.agn(lr=self.lr, window=self.window)


class EasgdBlock(Block):
    """Give `alpha`, or `rho` with alpha = rho * lr."""

    rule: Literal["easgd"]
    lr: PositiveFloat
    alpha: Annotated[float, Field(gt=0, le=1)] | None = None
    rho: PositiveFloat | None = None
    window: PositiveInt = 1

    @model_validator(mode="after")
    def _alpha_or_rho(self):
        if (self.alpha is None) == (self.rho is None):
            raise ValueError("give exactly one of `alpha` or `rho` (alpha = rho * lr)")
        if self.rho is not None and not 0 < self.rho * self.lr <= 1:
            raise ValueError(f"alpha = rho * lr = {self.rho * self.lr} must lie in (0, 1]")
        return self

    def build(self) -> rules.Rule:
        from gemsim import rules

        alpha = self.alpha if self.alpha is not None else self.rho * self.lr
        return rules.easgd(lr=self.lr, alpha=alpha, window=self.window)


class DcasgdBlock(Block):
    rule: Literal["dcasgd"]
    lr: PositiveFloat
    lam: Annotated[float, Field(ge=0)] = 0.04
    adaptive: bool = False
    decay: Annotated[float, Field(ge=0, lt=1)] = 0.95
    lam0: PositiveFloat = 2.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.dcasgd(
            lr=self.lr, lam=self.lam, adaptive=self.adaptive, decay=self.decay, lam0=self.lam0
        )


class SyncBlock(Block):
    rule: Literal["sync"]
    lr: PositiveFloat
    momentum: Momentum = 0.9

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.sync(lr=self.lr, momentum=self.momentum)
