"""The one set of value checks every stage uses, and the base class of the errors a user fixes.

A check returns the normalised value or raises ``ValueError`` naming the field, the bad value
and what is allowed, e.g. ``LogNormal.sigma must be a finite number >= 0, got -1.0``. Stages
call them from ``__post_init__`` or from a factory, so a bad value fails where it is built.
"""

from __future__ import annotations

import math
import numbers
from enum import Enum
from typing import TypeVar

E = TypeVar("E", bound=Enum)


class UserError(ValueError):
    """An error the user can fix (a bad file, field, value or folder). The command line prints
    its message and exits with code 2; nothing of it is a traceback.

    Args:
        source: what is wrong: a file, a folder, an argument.
        problems: one message, or several (each names the field, the value and what is
            allowed).
    """

    def __init__(self, source: str, problems: str | list[str]):
        self.source = str(source)
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__(self.render())

    def render(self) -> str:
        if len(self.problems) == 1:
            return f"{self.source}: {self.problems[0]}"
        return f"{self.source}:\n" + "\n".join(f"  - {p}" for p in self.problems)


def describe_value(value: object, limit: int = 80) -> str:
    """A short, readable rendering of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def is_real(value: object) -> bool:
    """A real number that is not a bool (``True`` as a latency or a rate is a typo)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
    def num(x: float) -> str:
        return str(int(x)) if x == int(x) else str(x)

    if high == math.inf and low == -math.inf:
        return ""
    if high == math.inf:
        return f"{'>' if low_open else '>='} {num(low)}"
    if low == -math.inf:
        return f"{'<' if high_open else '<='} {num(high)}"
    left, right = ("(" if low_open else "["), (")" if high_open else "]")
    return f"in {left}{low}, {high}{right}"


def is_traced(value: object) -> bool:
    """A value JAX traces (it has an abstract value): a hyperparameter of runs executed
    together in one program (`engine: {many_runs}`), each run's own value having been
    checked when its scenario was loaded. Checks pass it through unchanged."""
    return hasattr(value, "aval")


def check_real(
    name: str,
    value: object,
    *,
    low: float = -math.inf,
    high: float = math.inf,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """``value`` as a float if it is a finite real in the interval, else ``ValueError``
    (a traced value is returned as it is: `is_traced`)."""
    if is_traced(value):
        return value  # type: ignore[return-value]
    ok = is_real(value) and math.isfinite(float(value))  # type: ignore[arg-type]
    if ok:
        v = float(value)  # type: ignore[arg-type]
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        where = _interval(low, high, low_open, high_open)
        allowed = f"a finite number {where}".rstrip()
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def check_nonnegative(name: str, value: object) -> float:
    """A finite float >= 0."""
    return check_real(name, value, low=0.0)


def check_positive(name: str, value: object) -> float:
    """A finite float > 0."""
    return check_real(name, value, low=0.0, low_open=True)


def check_int(name: str, value: object, minimum: int, maximum: int | None = None) -> int:
    """An int in ``[minimum, maximum]`` (bools refused), else ``ValueError``."""
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if not ok or value < minimum or (maximum is not None and value > maximum):  # type: ignore[operator]
        upper = "" if maximum is None else f" and <= {maximum}"
        raise ValueError(f"{name} must be an integer >= {minimum}{upper}, got {value!r}")
    return int(value)  # type: ignore[arg-type]


def check_bool(name: str, value: object) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a bool, got {value!r}")
    return value


def check_enum(name: str, value: object, enum: type[E]) -> E:
    """An ``enum`` member, from a member or its value string; else ``ValueError`` listing them."""
    if isinstance(value, enum):
        return value
    for member in enum:
        if isinstance(value, str) and value == member.value:
            return member
    allowed = ", ".join(f"{enum.__name__}.{m.name} ({m.value!r})" for m in enum)
    raise ValueError(f"{name} must be one of {allowed}; got {value!r}")


def check_instance(name: str, value: object, types: tuple[type, ...], *, optional: bool = False):
    """``value`` if it is one of ``types`` (or None when ``optional``), else ``ValueError``."""
    if (optional and value is None) or isinstance(value, types):
        return value
    allowed = ", ".join(t.__name__ for t in types) + (" or None" if optional else "")
    raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
