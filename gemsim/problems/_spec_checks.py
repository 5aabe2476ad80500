"""The field checks the model and data-set specs share: a bad value fails when the spec is
built, the message naming the spec and the field (``Mlp: hidden[0]``)."""

from __future__ import annotations

import math

from gemsim._checks import check_int, check_real

__all__ = ["check_float_field", "check_int_field"]


def check_int_field(owner: str, name: str, value: object, minimum: int) -> None:
    check_int(f"{owner}: {name}", value, minimum)


def check_float_field(
    owner: str, name: str, value: object, low: float, high: float = math.inf
) -> None:
    check_real(f"{owner}: {name}", value, low=low, high=high)
