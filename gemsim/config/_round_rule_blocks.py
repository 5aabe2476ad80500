"""Blocks of the round rules: the centre moves only when a round, a buffer or a batch of
gradients is complete (synchronous SGD, Rennala, Malenia, FedBuff, FADAS). Each block builds
its rule; a default of None means "the number of workers", resolved when the rule is
initialised (but FADAS's `tau_c`, where None is no delay adaptation). CA2FL and MIFA keep
state per client: `build_rule` gives them the scenario's clients. FedCompass's block also
gives the scenario its protocol (`resolve_protocol`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import (
    Field,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    ValidationInfo,
    field_validator,
)

from ._block import ADDED, Block
from ._gradient_rule_blocks import Momentum
from ._windows import Window, static_window

if TYPE_CHECKING:
    from gemsim import rules, timing


class SyncBlock(Block):
    rule: Literal["sync"]
    lr: PositiveFloat
    momentum: Momentum = 0.9

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.sync(lr=self.lr, momentum=self.momentum)


class RennalaBlock(Block):
    """`restarts: true`: Rennala SGD as its authors' `RennalaSGD` runs it: at every step every
    worker drops its computation in flight and starts again on the new point (the timing
    model's `BatchRestarts`), instead of the paper's server loop, which lets them finish and
    discards the stale gradients on arrival (`restarts: false`)."""

    rule: Literal["rennala"]
    lr: PositiveFloat
    batch: PositiveInt | None = None  # None: the number of workers
    restarts: Annotated[bool, ADDED] = False

    def build(self) -> rules.Rule:
        from gemsim import rules

        if self.restarts:  # left out otherwise: the default rule, called as it always was
            return rules.rennala(lr=self.lr, batch=self.batch, restarts=True)
        return rules.rennala(lr=self.lr, batch=self.batch)


class MaleniaBlock(Block):
    rule: Literal["malenia"]
    lr: PositiveFloat
    batch: PositiveInt | None = None  # the paper's S; None: the number of workers

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.malenia(lr=self.lr, batch=self.batch)


class _BufferedBlock(Block):
    """The buffered local-SGD rules' fields (FedBuff, CA2FL, MIFA: `rules.<rule>` builds
    each from the same four)."""

    rule: str  # each rule's Literal; declared here so that dumps list it first
    lr: PositiveFloat
    window: Window = 8
    buffer: PositiveInt = 10
    server_lr: PositiveFloat = 1.0

    def build(self) -> rules.Rule:
        from gemsim import rules

        return getattr(rules, self.rule)(
            lr=self.lr,
            window=static_window(self.window),
            buffer=self.buffer,
            server_lr=self.server_lr,
        )


class FedbuffBlock(_BufferedBlock):
    rule: Literal["fedbuff"]


class FadasBlock(Block):
    """`tau_c` left out: no delay adaptation; `authors_code: true`: the authors' code's bias
    corrections and `server_lr / tau_max` past the threshold (`gemsim.rules.fadas`)."""

    rule: Literal["fadas"]
    lr: PositiveFloat
    server_lr: PositiveFloat
    window: Window = 8
    buffer: PositiveInt = 5
    beta1: Momentum = 0.9  # a decay in [0, 1), as a momentum is
    beta2: Momentum = 0.99
    eps: PositiveFloat = 1e-8
    tau_c: NonNegativeInt | None = None
    authors_code: bool = False

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.fadas(
            lr=self.lr,
            server_lr=self.server_lr,
            window=static_window(self.window),
            buffer=self.buffer,
            beta1=self.beta1,
            beta2=self.beta2,
            eps=self.eps,
            tau_c=self.tau_c,
            authors_code=self.authors_code,
        )


class Ca2flBlock(_BufferedBlock):
    rule: Literal["ca2fl"]


class MifaBlock(_BufferedBlock):
    rule: Literal["mifa"]
    buffer: PositiveInt = 1


class FedcompassBlock(Block):
    """FedCompass (`gemsim.rules.fedcompass`) and its scheduler (`timing.Compass`, the
    scenario's protocol): `window` is Q_max, `min_window` Q_min (default window // 5, at
    least 1: the authors' 20 of 100), `latest` the latest-arrival factor, `speed_momentum`
    the weight of each new speed observation; the defaults are the authors' configuration."""

    rule: Literal["fedcompass"]
    lr: PositiveFloat
    window: PositiveInt = 100
    min_window: PositiveInt | None = None
    latest: Annotated[float, Field(ge=1.0, allow_inf_nan=False)] = 1.5
    speed_momentum: Annotated[float, Field(gt=0.0, le=1.0)] = 0.9
    server_lr: PositiveFloat = 0.9
    staleness_exponent: Annotated[float, Field(ge=0.0, allow_inf_nan=False)] = 0.5

    @field_validator("min_window")
    @classmethod
    def _bounds_in_order(cls, value: int | None, info: ValidationInfo) -> int | None:
        window = info.data.get("window")
        if value is not None and window is not None and value > window:
            raise ValueError(
                f"{value} exceeds window {window}: FedCompass's Q_min must be <= Q_max; "
                f"allowed: 1 <= min_window <= window"
            )
        return value

    @property
    def q_min(self) -> int:
        return self.min_window if self.min_window is not None else max(1, self.window // 5)

    def protocol(self) -> timing.Compass:
        from gemsim import timing

        return timing.Compass(self.window, self.q_min, self.latest, self.speed_momentum)

    def build(self) -> rules.Rule:
        from gemsim import rules

        return rules.fedcompass(
            lr=self.lr,
            window=self.window,
            server_lr=self.server_lr,
            staleness_exponent=self.staleness_exponent,
        )
