"""Staleness weight functions `s(tau)` in a rule block (`staleness`, `fedasync`): `inverse`,
`{kind: polynomial, a}`, `{kind: hinge, a, b}` or `constant`; a bare name is shorthand for
`{kind: name}`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PositiveFloat

from ._block import Block


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


def weight_shorthand(data: Any) -> Any:
    """A rule block's raw data with `weight: name` read as `weight: {kind: name}`."""
    if isinstance(data, dict) and isinstance(data.get("weight"), str):
        return {**data, "weight": {"kind": data["weight"]}}
    return data
