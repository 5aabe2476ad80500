"""Blocks of the gradient rules: each commit carries a worker's gradient(s), applied to the
centre as it comes, scaled, damped or discarded by the rule (asynchronous SGD and its
staleness corrections). Each block builds its rule; `gemsim.rules` (JAX) is imported by
`build()` only, so that loading a scenario stays light. A default of None means "the number
of workers", resolved when the rule is initialised."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from ._block import ADDED, Block
from ._weight_blocks import InverseWeight, Weight, weight_shorthand
from ._windows import Window, static_window

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
    window: Window = 1
    local_momentum: Momentum = 0.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.downpour(
            lr=self.lr, window=static_window(self.window), local_momentum=self.local_momentum
        )


class AgnBlock(Block):
    rule: Literal["agn"]
    lr: PositiveFloat
    window: Window = 1

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.agn(lr=self.lr, window=static_window(self.window))


class StalenessBlock(Block):
    rule: Literal["staleness"]
    lr: PositiveFloat
    weight: Weight = InverseWeight(kind="inverse")

    @model_validator(mode="before")
    @classmethod
    def _weight_shorthand(cls, data):
        return weight_shorthand(data)

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


class DelayAdaptiveBlock(Block):
    rule: Literal["delay_adaptive"]
    lr: PositiveFloat
    tau_c: PositiveFloat | None = None  # None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.delay_adaptive(lr=self.lr, tau_c=self.tau_c)


class RingmasterBlock(Block):
    """`stops: true`: Ringmaster ASGD with calculation stops (the paper's algorithm with
    stops, the authors' `RingmasterASGD`): a computation whose delay reaches `threshold` is
    stopped and restarted on the current point (the timing model's `DelayStops`), instead of
    finished and discarded on arrival (`stops: false`, the paper's algorithm without stops)."""

    rule: Literal["ringmaster"]
    lr: PositiveFloat
    threshold: PositiveInt | None = None  # None: the number of workers
    stops: Annotated[bool, ADDED] = False

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.ringmaster(lr=self.lr, threshold=self.threshold)


class GapAwareBlock(Block):
    rule: Literal["gap_aware"]
    lr: PositiveFloat
    momentum: Momentum = 0.0
    ema: Annotated[float, Field(ge=0, lt=1)] = 0.999  # decay of C's mean square

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.gap_aware(lr=self.lr, momentum=self.momentum, ema=self.ema)


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
