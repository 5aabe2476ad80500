"""Blocks of the model rules: workers take local steps on their own variables and the server
mixes their models or displacements into the centre (elastic averaging, FedAsync). Each block
builds its rule; `local` (an optax inner and outer optimizer) is in `_open_rule_blocks.py`
beside the optax blocks it is made of."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, model_validator

from ._block import Block
from ._gradient_rule_blocks import Momentum
from ._weight_blocks import PolynomialWeight, Weight, weight_shorthand
from ._windows import Window, static_window

if TYPE_CHECKING:
    from gemsim import rules

MixingRate = Annotated[float, Field(gt=0, le=1)]


def moving_rate(lr: float, alpha: float | None, rho: float | None) -> float:
    """The elastic moving rate of a block that gives `alpha`, or `rho` with alpha = rho * lr
    (the EASGD paper's notation); exactly one of them, and alpha in (0, 1]."""
    if (alpha is None) == (rho is None):
        raise ValueError("give exactly one of `alpha` or `rho` (alpha = rho * lr)")
    if rho is not None and not 0 < rho * lr <= 1:
        raise ValueError(f"alpha = rho * lr = {rho * lr} must lie in (0, 1]")
    return alpha if alpha is not None else rho * lr


class _ElasticBlock(Block):
    """A block with `lr`, `alpha` and `rho` (the subclasses declare them, in their own field
    order): the moving rate checked when the block is read."""

    @model_validator(mode="after")
    def _alpha_or_rho(self):
        self.moving_rate()
        return self

    def moving_rate(self) -> float:
        return moving_rate(self.lr, self.alpha, self.rho)


class EasgdBlock(_ElasticBlock):
    """Give `alpha`, or `rho` with alpha = rho * lr."""

    rule: Literal["easgd"]
    lr: PositiveFloat
    alpha: MixingRate | None = None
    rho: PositiveFloat | None = None
    window: Window = 1

    def build(self) -> rules.Rule:
        from gemsim import rules

        alpha = self.moving_rate()
        return rules.easgd(lr=self.lr, alpha=alpha, window=static_window(self.window))


class EamsgdBlock(_ElasticBlock):
    """Give `alpha`, or `rho` with alpha = rho * lr (the paper's notation), as for `easgd`."""

    rule: Literal["eamsgd"]
    lr: PositiveFloat
    alpha: MixingRate | None = None
    rho: PositiveFloat | None = None
    window: Window = 10
    momentum: Momentum = 0.99  # the paper's delta

    def build(self) -> rules.Rule:
        from gemsim import rules

        alpha = self.moving_rate()
        return rules.eamsgd(
            lr=self.lr, alpha=alpha, window=static_window(self.window), momentum=self.momentum
        )


class FedasyncBlock(Block):
    """`weight` as for `staleness` (`inverse`, `{kind: polynomial, a}`, `{kind: hinge, a, b}`,
    `constant`), evaluated at the paper's t - tau (the commit's staleness plus one); FedAsync's
    polynomial with a = 0.5 by default."""

    rule: Literal["fedasync"]
    lr: PositiveFloat
    alpha: MixingRate = 0.6
    rho: NonNegativeFloat = 0.0
    window: Window = 8
    weight: Weight = PolynomialWeight(kind="polynomial", a=0.5)

    @model_validator(mode="before")
    @classmethod
    def _weight_shorthand(cls, data):
        return weight_shorthand(data)

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.fedasync(
            lr=self.lr,
            alpha=self.alpha,
            rho=self.rho,
            window=static_window(self.window),
            weight=self.weight.build(),
        )
