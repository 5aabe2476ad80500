"""The blocks of the newer asynchronous-SGD rules (2013-2025); each builds its rule.

Parameter names are the rules' own (`gemsim.rules`); a default of None means "the number of
workers", resolved when the rule is initialised.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator

from ._block import Block
from ._optimizer_blocks import Momentum, PolynomialWeight, Weight

if TYPE_CHECKING:
    from gemsim import rules

MixingRate = Annotated[float, Field(gt=0, le=1)]


class DelayAdaptiveBlock(Block):
    rule: Literal["delay_adaptive"]
    lr: PositiveFloat
    tau_c: PositiveFloat | None = None  # None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.delay_adaptive(lr=self.lr, tau_c=self.tau_c)


class RingmasterBlock(Block):
    rule: Literal["ringmaster"]
    lr: PositiveFloat
    threshold: PositiveInt | None = None  # None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.ringmaster(lr=self.lr, threshold=self.threshold)


class RennalaBlock(Block):
    rule: Literal["rennala"]
    lr: PositiveFloat
    batch: PositiveInt | None = None  # None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.rennala(lr=self.lr, batch=self.batch)


class MaleniaBlock(Block):
    rule: Literal["malenia"]
    lr: PositiveFloat
    batch: PositiveInt | None = None  # the paper's S; None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.malenia(lr=self.lr, batch=self.batch)


class FedbuffBlock(Block):
    rule: Literal["fedbuff"]
    lr: PositiveFloat
    window: PositiveInt = 8
    buffer: PositiveInt = 10
    server_lr: PositiveFloat = 1.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.fedbuff(
            lr=self.lr, window=self.window, buffer=self.buffer, server_lr=self.server_lr
        )


class FedasyncBlock(Block):
    """`weight` as for `staleness` (`inverse`, `{kind: polynomial, a}`, `{kind: hinge, a, b}`,
    `constant`), evaluated at the paper's t - tau (the commit's staleness plus one); FedAsync's
    polynomial with a = 0.5 by default."""

    rule: Literal["fedasync"]
    lr: PositiveFloat
    alpha: MixingRate = 0.6
    rho: NonNegativeFloat = 0.0
    window: PositiveInt = 8
    weight: Weight = PolynomialWeight(kind="polynomial", a=0.5)

    @model_validator(mode="before")
    @classmethod
    def _weight_shorthand(cls, data):
        """`weight: constant` is shorthand for `weight: {kind: constant}`."""
        if isinstance(data, dict) and isinstance(data.get("weight"), str):
            return {**data, "weight": {"kind": data["weight"]}}
        return data

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.fedasync(
            lr=self.lr,
            alpha=self.alpha,
            rho=self.rho,
            window=self.window,
            weight=self.weight.build(),
        )


class ServerMomentumBlock(Block):
    rule: Literal["server_momentum"]
    lr: PositiveFloat
    momentum: Momentum = 0.9
    implicit_correction: bool = False

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.server_momentum(
            lr=self.lr, momentum=self.momentum, implicit_correction=self.implicit_correction
        )


class GapAwareBlock(Block):
    rule: Literal["gap_aware"]
    lr: PositiveFloat
    momentum: Momentum = 0.0
    ema: Annotated[float, Field(ge=0, lt=1)] = 0.999  # decay of C's mean square

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.gap_aware(lr=self.lr, momentum=self.momentum, ema=self.ema)


class EamsgdBlock(Block):
    """Give `alpha`, or `rho` with alpha = rho * lr (the paper's notation), as for `easgd`."""

    rule: Literal["eamsgd"]
    lr: PositiveFloat
    alpha: MixingRate | None = None
    rho: PositiveFloat | None = None
    window: PositiveInt = 10
    momentum: Momentum = 0.99  # the paper's delta

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
        return rules.eamsgd(lr=self.lr, alpha=alpha, window=self.window, momentum=self.momentum)
